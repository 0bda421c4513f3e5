"""Locating dataset files, the container formats several readers share (per-client
``.npz``, MATLAB cell arrays) and validating what the readers return.

Where dataset files are looked for (paper, Appendix "Additional Details on Datasets", lists the six
public datasets; the documentation's "Datasets" page gives their on-disk layouts): a run's
``data_dir``, when given, and nothing else unless ``data_search`` is set; otherwise
``$SHEAF_FMTL_DATA``, then the per-user data folder (:func:`user_data_dir`, where ``sheaf-fmtl data
fetch`` stores downloads). Folders are tried in that order and, within a folder, the names in the
order given, so the first folder holding any form of a dataset is the one read. No other folder is
ever read.
"""

from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from ..spelling import setting
from .base import DatasetError, RawClient, Task
from .bounded import LARGE, MiB, UnboundedFile, read_text_bounded
from .sizes import check_fits, stored_bytes

ENV_VAR = "SHEAF_FMTL_DATA"
APP_DIR = "sheaf-fmtl"

#: How to obtain each dataset (shown when its files are missing).
HOW_TO_GET: dict[str, str] = {
    "vehicle": "MOCHA's vehicle.mat (Smith et al. 2017; Duarte & Hu 2004): `sheaf-fmtl data fetch vehicle`",
    "gleam": "MOCHA-style gleam.mat (Rahman et al. 2015, non-commercial use): `sheaf-fmtl data fetch gleam`",
    "har": "UCI HAR (Anguita et al. 2013), unzip 'UCI HAR Dataset/': `sheaf-fmtl data fetch har`",
    "school": "MALSAR school.mat (jiayuzhou/MALSAR data/school.mat): `sheaf-fmtl data fetch school`",
    "rmnist": "mnist.npz (Keras layout) or the four MNIST idx(.gz) files: `sheaf-fmtl data fetch rmnist`",
    "hcifar10": "CIFAR-10 python version, untar 'cifar-10-batches-py/': `sheaf-fmtl data fetch hcifar10`",
}


def user_data_dir() -> Path:
    """The per-user data folder: ``$XDG_DATA_HOME/sheaf-fmtl`` (default ``~/.local/share/sheaf-fmtl``)
    on Linux, ``~/Library/Application Support/sheaf-fmtl`` on macOS, ``%LOCALAPPDATA%\\sheaf-fmtl``
    on Windows (``platformdirs``' rules). ``sheaf-fmtl data fetch`` stores downloads there."""
    return Path(platformdirs.user_data_dir(APP_DIR, appauthor=False))


def search_dirs(data_dir: Path | str | None = None, search: bool = False) -> list[Path]:
    """Folders searched for data files, in order.

    Args:
        data_dir: the run's ``data_dir``, or ``None``: when given, the only folder searched unless
            ``search``.
        search: with ``data_dir``, go on to ``$SHEAF_FMTL_DATA`` and :func:`user_data_dir`.
    Returns:
        ``[data_dir]``; or the distinct folders among ``data_dir``, ``$SHEAF_FMTL_DATA`` and
        :func:`user_data_dir`, in that order.
    """
    dirs = [] if data_dir is None or str(data_dir) == "" else [Path(data_dir)]
    if dirs and not search:
        return dirs
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env))
    dirs.append(user_data_dir())
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


def candidates(names: Sequence[str], data_dir: Path | str | None = None, search: bool = False) -> list[Path]:
    """Every path :func:`find_file` would try, in order (``names`` relative to each folder)."""
    return [d / n for d in search_dirs(data_dir, search) for n in names]


def find_file(
    dataset: str, names: Sequence[str], data_dir: Path | str | None = None, search: bool = False
) -> Path:
    """The first existing ``dir/name`` (folders of :func:`search_dirs`); raises :class:`DatasetError`
    naming every path searched and how to obtain the files."""
    tried = candidates(names, data_dir, search)
    for path in tried:
        if path.exists():
            return path
    how = HOW_TO_GET.get(dataset, "see the documentation's Datasets page")
    if data_dir and not search:
        missing = "" if Path(data_dir).is_dir() else " (no such folder)"
        raise DatasetError(
            f"{dataset}: no data file in data_dir {data_dir}{missing} "
            f"(looked for {', '.join(map(str, tried))}). "
            f"Obtain it: {how} (with --dest {data_dir}); or pass {setting('data_search', True)} to search "
            f"${ENV_VAR} and {user_data_dir()} after it."
        )
    listing = "\n  ".join(str(p) for p in tried)
    raise DatasetError(
        f"{dataset}: data file not found; searched:\n  {listing}\n"
        f"Obtain it: {how} (stores it in {user_data_dir()}); or put it in a folder and pass "
        f"{setting('data_dir', 'FOLDER')} or set ${ENV_VAR}."
    )


def try_find(names: Sequence[str], data_dir: Path | str | None = None, search: bool = False) -> Path | None:
    """Like :func:`find_file` but returns ``None`` when nothing exists."""
    return next((p for p in candidates(names, data_dir, search) if p.exists()), None)


def mat_cells(mat: Mapping[str, Any], key: str, path: Path) -> list[Any]:
    """The entries of a 1-D MATLAB cell array ``key`` of a ``scipy.io.loadmat`` result."""
    if key not in mat:
        raise DatasetError(f"{path}: no variable {key!r} (expected MATLAB cell arrays X and Y)")
    arr = mat[key]
    if not isinstance(arr, np.ndarray) or arr.dtype != object or min(arr.shape, default=0) > 1:
        raise DatasetError(f"{path}: {key} is not a 1-D cell array (got {getattr(arr, 'shape', '?')})")
    return list(arr.reshape(-1))


#: The most bytes one client's CSV file may hold (it is parsed whole, into a few times its size).
CSV_LIMIT = LARGE


def read_client_csv(path: Path) -> str:
    """The text of one client's CSV file, read only when it is a regular file of at most
    :data:`CSV_LIMIT` bytes: a link to ``/dev/zero``, a FIFO or a larger file is refused unread, in
    one line naming it (DatasetError)."""
    try:
        return read_text_bounded(path, CSV_LIMIT)
    except UnboundedFile as e:
        raise DatasetError(f"client CSV {e} ({_csv_hint(path)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read ({e})") from e


def _csv_hint(path: Path) -> str:
    """What to do about a client's CSV file that was refused unread: too large, or not a file."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
    except OSError:
        regular = False
    if not regular:
        return "a client's CSV must be a regular file of rows, e.g. client_0.csv with lines 0.5,1.2,1"
    return (
        f"a client's CSV may hold at most {CSV_LIMIT // MiB} MiB; give larger clients as a per-client "
        ".npz, file:DATA.npz, whose size is checked against the memory left"
    )


_NPZ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


def read_npz_clients(path: Path) -> list[dict[str, np.ndarray]]:
    """Arrays of each client of a per-client ``.npz`` (keys ``x``, ``y``, maybe ``x_test``, ``y_test``,
    ``features``: the shared-feature-space ids of the client's columns).

    Everything is read eagerly so a truncated member fails here, with the file named. Clients stored
    beyond ``num_clients`` are an error (they would be ignored silently)."""
    _check_zip(path)
    check_fits(2 * stored_bytes(path), f"{path}", "give a smaller file")  # its headers, before any data
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = set(z.files)
            if "num_clients" not in keys:
                raise DatasetError(
                    f"{path}: no 'num_clients' key (per-client .npz layout: num_clients, x_i, y_i, "
                    "optional x_test_i, y_test_i)"
                )
            n = _count(path, np.asarray(z["num_clients"]))
            if n < 1:
                raise DatasetError(f"{path}: num_clients = {n}")
            stored = _stored_clients(keys)
            if stored > n:
                raise DatasetError(
                    f"{path}: num_clients = {n} but the file stores {stored} clients (x_0..x_{stored - 1}); "
                    "fix num_clients or remove the extra clients"
                )
            out = []
            for i in range(n):
                if f"x_{i}" not in keys or f"y_{i}" not in keys:
                    raise DatasetError(f"{path}: client {i} of {n}: keys x_{i} and y_{i} are required")
                client = {"x": z[f"x_{i}"], "y": z[f"y_{i}"]}
                has_test = (f"x_test_{i}" in keys, f"y_test_{i}" in keys)
                if any(has_test) and not all(has_test):
                    raise DatasetError(f"{path}: client {i} has only one of x_test_{i}, y_test_{i}")
                if all(has_test):
                    client["x_test"], client["y_test"] = z[f"x_test_{i}"], z[f"y_test_{i}"]
                if f"features_{i}" in keys:  # ids of its columns in one shared feature space
                    client["features"] = z[f"features_{i}"]
                out.append(client)
            return out
    except DatasetError:
        raise
    except _NPZ_ERRORS as e:
        raise DatasetError(f"{path}: cannot read as .npz ({type(e).__name__}: {e})") from e


def _check_zip(path: Path) -> None:
    """Refuse a file that is not an ``.npz`` (a zip archive) before numpy reads it (numpy would
    answer a text file with its words about pickled data)."""
    if path.is_file() and not zipfile.is_zipfile(path):
        raise DatasetError(
            f"{path}: not an .npz file (an .npz is a zip archive of arrays, as numpy.savez writes)"
        )


def _count(path: Path, value: np.ndarray) -> int:
    """``num_clients`` as a whole number (2.0 is 2; 2.7 or text is refused, never truncated)."""
    v = value.reshape(-1)[0] if value.size == 1 else f"an array of shape {value.shape}"
    if value.size != 1 or value.dtype.kind not in "iuf" or not np.isfinite(v) or v != int(v):
        raise DatasetError(f"{path}: num_clients = {v} is not a whole number of clients")
    return int(v)


def _stored_clients(keys: set[str]) -> int:
    """1 + the largest client index among keys ``x_i``, ``y_i``, ``x_test_i``, ``y_test_i``."""
    ids = [
        int(k.rsplit("_", 1)[1])
        for k in keys
        if k.rsplit("_", 1)[0] in ("x", "y", "x_test", "y_test") and k.rsplit("_", 1)[-1].isdigit()
    ]
    return max(ids, default=-1) + 1


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


def checked_feature_ids(
    spec: str, parts: Sequence[Mapping[str, Any]], xs: list[np.ndarray], key: str
) -> tuple[np.ndarray, ...] | None:
    """The clients' ``features_i`` (ids of their columns in one shared feature space), checked: all
    clients or none, one distinct non-negative integer per column."""
    given = ["features" in c for c in parts]
    if not any(given):
        return None
    if not all(given):
        missing = given.index(False)
        raise DatasetError(
            f"{spec}: {key.format('i')} is given for some clients but not for client {missing}"
        )
    out = []
    for i, (c, x) in enumerate(zip(parts, xs, strict=True)):
        f = np.asarray(c["features"])
        width = int(np.prod(x.shape[1:]))
        if f.ndim != 1 or not np.issubdtype(f.dtype, np.integer) or len(f) != width:
            raise DatasetError(
                f"{spec}: {key.format(i)} must list one integer id per feature column ({width}), "
                f"got shape {f.shape} of {f.dtype}"
            )
        if len(np.unique(f)) != len(f) or (len(f) and f.min() < 0):
            raise DatasetError(f"{spec}: {key.format(i)} must be distinct ids >= 0")
        out.append(f.astype(np.int64))
    return tuple(out)


def raw_clients(arrays: Sequence[tuple[Any, ...]], task: Task) -> tuple[RawClient, ...]:
    """The clients' ``(x, y, x_test, y_test)`` as :class:`RawClient`: float32 features, int64
    class ids or float32 targets (a missing test split stays ``None``)."""
    ydt = np.int64 if task == "classification" else np.float32
    return tuple(
        RawClient(
            x.astype(np.float32),
            y.astype(ydt),
            None if xt is None else xt.astype(np.float32),
            None if yt is None else yt.astype(ydt),
        )
        for x, y, xt, yt in arrays
    )
