"""What the data pipeline did to each client's features before training, as the run folder keeps
it (``preprocessing.json``): so that a trained client's model can be applied to raw data
(:func:`sheaf_fmtl.load`, ``sheaf-fmtl export``).

Format (``format`` 1)::

    {"format": 1, "task": "classification", "num_classes": 10, "dataset": "...",
     "clients": [{"feature_shape": [d], "standardize": {"mean": [...], "std": [...]}}, ...]}

``standardize`` is ``null`` for a client whose features were used as read (``standardize=false``, a
data-less server node), and for a client read in another silo (``"elsewhere": true``: its statistics
stay with its data, in the preprocessing record of its own machine's run folder); otherwise the model
saw ``(x - mean) / std`` (float32, elementwise over the feature shape; the statistics of the client's
training data, the paper's protocol). Numbers are written as Python's ``repr`` of float32 values
widened to float64, so they read back exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..spelling import setting
from .base import DatasetError, FederatedDataset
from .bounded import LARGE, read_text_bounded

FILE = "preprocessing.json"
FORMAT = 1


def describe(dataset: FederatedDataset) -> dict[str, Any]:
    """``preprocessing.json``'s content for ``dataset`` (see the module docstring)."""
    stats = dataset.standardization
    if stats is not None and len(stats) != dataset.num_clients:  # a dataset changed after the protocol
        raise DatasetError(
            f"{dataset.name}: {len(stats)} clients' standardisation for {dataset.num_clients} clients"
        )
    clients = []
    for i in range(dataset.num_clients):
        entry: dict[str, Any] = {"feature_shape": list(dataset.feature_shape(i)), "standardize": None}
        if dataset.local is not None and not dataset.local[i]:
            entry["elsewhere"] = True  # read in another silo: its statistics stay there
        elif stats is not None and stats[i] is not None:
            mean, std = stats[i]  # type: ignore[misc]  # checked just above
            entry["standardize"] = {"mean": _floats(mean), "std": _floats(std)}
        clients.append(entry)
    return {
        "format": FORMAT,
        "dataset": dataset.name,
        "task": dataset.task,
        "num_classes": dataset.num_classes,
        "clients": clients,
    }


def _floats(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(a, np.float32).reshape(-1)]


def combine(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from the :func:`describe` of several processes that share a run folder: each
    client's entry from a process that read it (``elsewhere`` where none of them did)."""
    out = dict(records[0])
    entries = [r["clients"] for r in records]
    out["clients"] = [
        next((e[i] for e in entries if not e[i].get("elsewhere")), entries[0][i])
        for i in range(len(entries[0]))
    ]
    return out


def write(folder: Path, dataset: FederatedDataset | dict[str, Any]) -> Path:
    """Write ``folder/preprocessing.json`` (whole or not at all: a temporary file renamed onto it)
    of ``dataset`` (or a :func:`describe` record)."""
    path = folder / FILE
    tmp = folder / f".{FILE}.tmp"
    record = describe(dataset) if isinstance(dataset, FederatedDataset) else dataset
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)
    except BaseException:  # (a full disk: no part of it left behind)
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_same(folder: Path, dataset: FederatedDataset) -> None:
    """A resumed run reads the data its run started on: ``dataset`` (read again now, e.g. from
    another ``data_dir``) gives the ``preprocessing.json`` the run wrote (DatasetError naming the
    first difference otherwise; nothing to compare when the run wrote none)."""
    if not (folder / FILE).is_file():
        return
    saved, now = read(folder), json.loads(json.dumps(describe(dataset)))
    if len(saved["clients"]) == len(now["clients"]):  # a silo checks its own clients' statistics
        for i, (a, b) in enumerate(zip(saved["clients"], now["clients"], strict=True)):
            if a.get("elsewhere") or b.get("elsewhere"):
                saved["clients"][i] = {"feature_shape": a["feature_shape"]}
                now["clients"][i] = {"feature_shape": b["feature_shape"]}
    if saved == now:
        return
    keys = [k for k in now if saved.get(k) != now[k]]
    which = keys[0] if keys else "format"
    if which == "clients" and len(saved["clients"]) == len(now["clients"]):
        i = next(i for i, (a, b) in enumerate(zip(saved["clients"], now["clients"], strict=True)) if a != b)
        which = f"client {i}'s features or their standardisation"
    raise DatasetError(
        f"the data read now differ from the data the run of {folder} started on ({which}, recorded in "
        f"{folder / FILE}); a resume continues on the same data: give "
        f"the data_dir it used ({setting('data_dir', 'FOLDER')})"
    )


def read(folder: str | Path) -> dict[str, Any]:
    """``folder/preprocessing.json``, checked (:class:`DatasetError` naming the file otherwise)."""
    path = Path(folder) / FILE
    try:
        body = json.loads(read_text_bounded(path, LARGE))
    except FileNotFoundError:
        raise DatasetError(
            f"{path} is missing: the run was written by a version that did not keep its preprocessing "
            "(run it again to export its models)"
        ) from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path} cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    if (
        not isinstance(body, dict)
        or body.get("format") != FORMAT
        or not isinstance(body.get("clients"), list)
    ):
        raise DatasetError(f"{path} is not a preprocessing record of format {FORMAT}")
    for i, entry in enumerate(body["clients"]):
        shape = entry.get("feature_shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape):
            raise DatasetError(f"{path}: client {i} has no feature_shape (a list of positive integers)")
        std = entry.get("standardize")
        size = int(np.prod(shape))
        if std is not None and not (
            isinstance(std, dict) and len(std.get("mean", ())) == size and len(std.get("std", ())) == size
        ):
            raise DatasetError(f"{path}: client {i}'s standardize needs mean and std of {size} numbers each")
        if std is not None:
            _check_numbers(path, i, std["mean"], std["std"])
    return body


def _check_numbers(path: Path, i: int, mean: list[Any], std: list[Any]) -> None:
    """Every ``mean`` a finite number, every ``std`` a finite number above zero (the pipeline writes
    1 for a constant feature): a program that divides by it never outputs NaN or infinity."""
    bad = [v for v in mean if not _finite(v)]
    if bad:
        raise DatasetError(f"{path}: client {i}'s standardize mean holds {bad[0]!r}; expected finite numbers")
    bad = [v for v in std if not (_finite(v) and float(v) > 0)]
    if bad:
        raise DatasetError(
            f"{path}: client {i}'s standardize std holds {bad[0]!r}; expected finite numbers above 0 "
            "(features are divided by them)"
        )


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and bool(np.isfinite(float(v)))
