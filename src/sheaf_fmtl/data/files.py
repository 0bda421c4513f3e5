"""Locating dataset files, checking options and validating what the readers return.

Search order for a dataset file (paper, Appendix "Additional Details on Datasets", lists the six
public datasets; ``data/DATA.md`` describes their on-disk layouts): the request's ``data_dir`` when
given, otherwise ``$SHEAF_FMTL_DATA``, ``../shared/data`` (relative to the working directory) and
``/work/shared/data``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import DatasetError

ENV_VAR = "SHEAF_FMTL_DATA"

#: How to obtain each dataset (shown when its files are missing).
HOW_TO_GET: dict[str, str] = {
    "vehicle": "MOCHA's vehicle.mat (Smith et al. 2017; Duarte & Hu 2004): `sheaf-fmtl data fetch vehicle`",
    "gleam": "MOCHA-style gleam.mat (Rahman et al. 2015, non-commercial use): `sheaf-fmtl data fetch gleam`",
    "har": "UCI HAR (Anguita et al. 2013), unzip 'UCI HAR Dataset/': `sheaf-fmtl data fetch har`",
    "school": "MALSAR school.mat (jiayuzhou/MALSAR data/school.mat): `sheaf-fmtl data fetch school`",
    "rmnist": "mnist.npz (Keras layout) or the four MNIST idx(.gz) files: `sheaf-fmtl data fetch rmnist`",
    "hcifar10": "CIFAR-10 python version, untar 'cifar-10-batches-py/': `sheaf-fmtl data fetch hcifar10`",
}


def search_dirs(data_dir: Path | str | None = None) -> list[Path]:
    """Folders searched for data files, in order."""
    if data_dir is not None:
        return [Path(data_dir)]
    dirs: list[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env))
    dirs += [Path.cwd().parent / "shared" / "data", Path("/work/shared/data")]
    unique: list[Path] = []
    for d in dirs:
        if not any(_same(d, u) for u in unique):
            unique.append(d)
    return unique


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def candidates(names: Sequence[str], data_dir: Path | str | None = None) -> list[Path]:
    """Every path :func:`find_file` would try, in order (``names`` relative to each folder)."""
    return [d / n for d in search_dirs(data_dir) for n in names]


def find_file(dataset: str, names: Sequence[str], data_dir: Path | str | None = None) -> Path:
    """The first existing ``dir/name``; raises :class:`DatasetError` naming every path searched."""
    tried = candidates(names, data_dir)
    for path in tried:
        if path.exists():
            return path
    how = HOW_TO_GET.get(dataset, "see data/DATA.md")
    listing = "\n  ".join(str(p) for p in tried)
    raise DatasetError(
        f"{dataset}: data file not found; searched:\n  {listing}\n"
        f"Obtain it: {how}; put it in one of these folders or pass data_dir / ${ENV_VAR}."
    )


def try_find(names: Sequence[str], data_dir: Path | str | None = None) -> Path | None:
    """Like :func:`find_file` but returns ``None`` when nothing exists."""
    return next((p for p in candidates(names, data_dir) if p.exists()), None)


def check_options(name: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``given``; unknown keys raise :class:`DatasetError`."""
    unknown = set(given) - set(defaults)
    if unknown:
        raise DatasetError(f"{name}: unknown option(s) {sorted(unknown)}; allowed: {sorted(defaults)}")
    return {**defaults, **given}


def as_features(
    x: Any, path: Path, what: str, n_features: int | None = None, allow_nd: bool = False
) -> np.ndarray:
    """``x`` as a finite float ``(n, features)`` array (``(n, *shape)`` when ``allow_nd``)."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{path}: {what} is not numeric ({e})") from e
    if arr.ndim != 2 and not (allow_nd and arr.ndim > 2):
        raise DatasetError(f"{path}: {what} has shape {arr.shape}; expected (n, features)")
    if n_features is not None and arr.shape[1] != n_features:
        raise DatasetError(f"{path}: {what} has {arr.shape[1]} features; expected {n_features}")
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"{path}: {what} contains NaN or infinite values")
    return arr


def as_targets(y: Any, path: Path, what: str, n: int) -> np.ndarray:
    """``y`` flattened to ``[n]`` float, finite; a column vector ``(n, 1)`` is accepted."""
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise DatasetError(f"{path}: {what} is not numeric ({e})") from e
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1 or len(arr) != n:
        raise DatasetError(f"{path}: {what} has shape {np.shape(y)}; expected {n} targets")
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"{path}: {what} contains NaN or infinite values")
    return arr


def map_labels(y: np.ndarray, path: Path, what: str, mapping: Mapping[float, int]) -> np.ndarray:
    """Map label values through ``mapping`` (e.g. {-1: 0, 1: 1}); others raise DatasetError."""
    out = np.full(len(y), -1, dtype=np.int64)
    for src, dst in mapping.items():
        out[y == src] = dst
    if np.any(out < 0):
        bad = sorted(set(np.unique(y[out < 0]).tolist()))[:5]
        raise DatasetError(f"{path}: {what} has labels {bad} outside {sorted(mapping)}")
    return out
