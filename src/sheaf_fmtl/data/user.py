"""The user's own federated data: files named by ``file:PATH`` and Python objects.

Files, ``file:PATH`` (:func:`load_user`), in two layouts: a per-client ``.npz`` (``num_clients``,
``x_i``, ``y_i``, optional ``x_test_i``/``y_test_i`` used as a fixed test split), or a folder with one CSV per
client (sorted by file name, last column the target, an optional non-numeric header row; across
processes each rank reads only its clients' files, :func:`held_files`). The task
is inferred (integer targets with at most ``max_classes`` distinct values -> classification) or
forced with option ``task``. Clients may have different feature counts (the setting of the paper's
Section 5.2 with different model sizes). Option ``reduce=false`` turns off the protocol's "half of
the clients keep 20% of their training data" for users who bring their own split.

Python objects (:func:`from_objects`): per-client data handed over as objects (:func:`sheaf_fmtl.run`'s
``data=``, or what a ``dataset: module:function`` returns): one entry per client, either arrays or tensors
``(x_train, y_train, x_test, y_test)``, a pair of ``torch.utils.data.Dataset`` ``(train, test)``
whose items are ``(x, y)``, or a mapping with the keys ``x``, ``y``, ``x_test``, ``y_test`` and
``features``, the ids of the client's columns in one shared feature space (as a file's
``features_i``: what ``maps=features`` couples).

One pooled labelled dataset ``(x, y)`` (two arrays or tensors, :mod:`.pooled`) is
split over the clients by the config's ``partition`` (:mod:`.partition`).

Datasets are read once, item by item, into memory: the federation stacks every client's data in
one tensor per cohort (on the run's device). Data that would not fit in the free memory is refused
before it is read (estimated from each dataset's first item); give such clients a
``torch.utils.data.Subset``. The task follows the targets' type: integer targets (class ids
``0..K-1``) classify, floating-point targets regress (one value per sample). The given train/test
split is kept (the paper's protocol neither re-splits nor reduces it); features are standardised
when the config's ``standardize`` is true.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..spelling import setting
from ..warn import user_stacklevel
from .base import DataRequest, DatasetError, RawFederated, Task
from .files import (
    as_features,
    as_targets,
    checked_feature_ids,
    raw_clients,
    read_client_csv,
    read_npz_clients,
)
from .options import check_options

#: The keys of a client's entry given as a mapping (beside the optional ``features``, its column ids).
ENTRY_KEYS = ("x", "y", "x_test", "y_test")
#: ``reduce=false`` keeps every client's whole training split (no "half of the clients keep 20%").
USER_DEFAULTS: dict[str, Any] = {"task": None, "max_classes": 100, "reduce": True}
USER_KINDS = {"task": "str?"}


def _read_csv(path: Path) -> np.ndarray:
    """One client's CSV as a ``[rows, columns]`` array (header row skipped), read only when it is a
    regular file of at most its bound (:func:`.files.read_client_csv`)."""
    text = read_client_csv(path)
    lines = [(k, ln) for k, ln in enumerate(text.splitlines(), 1) if ln.strip()]  # file line numbers
    if lines:
        try:
            [float(v) for v in lines[0][1].split(",")]
        except ValueError:
            lines = lines[1:]  # a header row
    rows = []
    width = None
    for k, ln in lines:
        try:
            row = [float(v) for v in ln.split(",")]
        except ValueError as e:
            raise DatasetError(f"{path}: line {k} is not numeric ({e})") from e
        if width is not None and len(row) != width:
            raise DatasetError(f"{path}: line {k} has {len(row)} columns; earlier lines have {width}")
        width = len(row)
        rows.append(row)
    if not rows or (width or 0) < 2:
        raise DatasetError(f"{path}: need at least one row with a feature column and a target column")
    return np.asarray(rows)


def infer_task(ys: list[np.ndarray], max_classes: int) -> Task:
    """Classification when all targets are integers with at most ``max_classes`` distinct values."""
    y = np.concatenate([np.ravel(v) for v in ys])
    if np.all(y == np.round(y)) and len(np.unique(y)) <= max_classes:
        return "classification"
    return "regression"


def check_label_kinds(spec: str, raw: list[Any]) -> None:
    """Refuse clients stored with integer labels beside clients with non-integer targets (one of
    them would silently make the whole federation a regression): say which, and how to choose."""
    ints = [i for i, y in enumerate(raw) if np.asarray(y).dtype.kind in "iub"]
    floats = [i for i, y in enumerate(raw) if i not in ints and np.any(np.asarray(y) != np.round(y))]
    if ints and floats:
        raise DatasetError(
            f"file:{spec}: mixed label types: client(s) {_few(ints)} hold integer labels, client(s) "
            f"{_few(floats)} non-integer targets; fix the file, or give "
            f"{setting('data.task', 'classification')} or {setting('data.task', 'regression')}"
        )


def _few(items: list[int]) -> str:
    return ", ".join(map(str, items[:5])) + (f" ... ({len(items)})" if len(items) > 5 else "")


def load_user(spec: str, request: DataRequest) -> RawFederated:
    """Build a :class:`RawFederated` from ``file:PATH`` (``spec`` is PATH)."""
    o = check_options(f"file:{spec}", request.options, USER_DEFAULTS, USER_KINDS)
    if o["task"] not in (None, "classification", "regression"):
        raise DatasetError(
            f"file:{spec}: data.task = {o['task']!r:.80} is not allowed; allowed: classification, regression "
            f"(e.g. {setting('data.task', 'classification')}), or leave it out to tell by the labels"
        )
    path = Path(spec).expanduser()
    if not path.is_absolute() and request.data_dir is not None and not path.exists():
        path = Path(request.data_dir) / path
    parts = _read_parts(spec, path, request)
    arrays = [_file_client(i, src, c) for i, (src, c) in enumerate(parts)]
    ys = [a[1] for a in arrays] + [a[3] for a in arrays if a[3] is not None]
    if o["task"] is None:
        check_label_kinds(spec, [c["y"] for _, c in parts])
    task: Task = o["task"] or infer_task(ys, int(o["max_classes"]))
    num_classes = 0
    if task == "classification":
        y_all = np.concatenate(ys)
        top = int(o["max_classes"]) - 1
        if np.any(y_all != np.round(y_all)) or y_all.min() < 0 or y_all.max() > top:
            raise DatasetError(f"file:{spec}: classification targets must be integers in 0..{top}")
        num_classes = max(int(y_all.max()) + 1, 2)
    clients = raw_clients(arrays, task)
    features = checked_feature_ids(
        f"file:{spec}", [c for _, c in parts], [a[0] for a in arrays], "features_{}"
    )
    return RawFederated(
        f"file:{path.name}", task, num_classes, clients, reduce=o["reduce"], features=features
    )


def _read_parts(spec: str, path: Path, request: DataRequest) -> list[tuple[Path, Mapping[str, Any]]]:
    """Per client held here, the file it was read from and its arrays by key (``x``, ``y``, maybe
    ``x_test``, ``y_test``, ``features``): a folder's CSVs, or an ``.npz``'s clients."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".csv")
        if not files:
            npz = sorted(p.name for p in path.iterdir() if p.suffix.lower() == ".npz")
            hint = f"; an .npz holds every client: give it, file:{path / npz[0]}" if npz else ""
            raise DatasetError(f"{path}: folder has no .csv files (one per client expected){hint}")
        tables = [(f, _read_csv(f)) for f in held_files(path, files, request)]
        return [(f, {"x": table[:, :-1], "y": table[:, -1]}) for f, table in tables]
    if path.is_file():
        if path.suffix.lower() == ".csv":  # one client's file: the folder of them is the dataset
            raise DatasetError(
                f"file:{spec}: one CSV file is one client's; give the folder holding one CSV per client "
                f"(file:{path.parent})"
            )
        return [(path, c) for c in read_npz_clients(path)]
    raise DatasetError(f"file:{spec}: {path} does not exist (give an .npz file or a folder of CSVs)")


def _file_client(
    i: int, src: Path, c: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(x, y, x_test, y_test)`` of client ``i`` read from ``src``, checked (no test split: ``None``s)."""
    what = f"client {i}"
    x = as_features(c["x"], src, f"{what} features", allow_nd=True)
    y = as_targets(c["y"], src, f"{what} targets", len(x))
    if "x_test" not in c:
        return x, y, None, None
    xt = as_features(c["x_test"], src, f"{what} test features", allow_nd=True)
    yt = as_targets(c["y_test"], src, f"{what} test targets", len(xt))
    if xt.shape[1:] != x.shape[1:]:
        shapes = f"{xt.shape[1:]} (test) vs {x.shape[1:]} (train)"
        raise DatasetError(f"{src}: {what} feature shapes differ: {shapes}")
    return x, y, xt, yt


def held_files(folder: Path, files: list[Path], request: DataRequest) -> list[Path]:
    """The CSV files of the clients held here (``request.held``; all without): by sorted position when
    the folder has one file per client, else (a silo's own folder) by the id that ends each name
    (``client_07.csv`` is client 7). No other file is opened."""
    held, n = request.held, request.clients
    if held is None or n is None:
        return files
    if len(files) == n:
        return [files[i] for i in held]
    by_id: dict[int, Path] = {}
    for f in files:
        digits = re.search(r"(\d+)$", f.stem)
        if digits is None or int(digits.group(1)) in by_id:
            raise DatasetError(
                f"{folder}: {len(files)} .csv files for {setting('clients', n)}: a silo's folder names each "
                f"file by its client's id (client_07.csv), one file per id; {f.name} does not"
            )
        by_id[int(digits.group(1))] = f
    missing = [i for i in held if i not in by_id]
    if missing:
        raise DatasetError(f"{folder}: no file for client(s) {_few(missing)} held here (client_ID.csv)")
    return [by_id[i] for i in held]


def _numpy(a: Any) -> np.ndarray:
    detach = getattr(a, "detach", None)
    if callable(detach):  # a torch tensor
        return np.asarray(a.detach().cpu().numpy())
    return np.asarray(a)


def _free_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not available on this system
        return None


def _is_dataset(obj: Any) -> bool:
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not hasattr(obj, "shape")


def _read_dataset(ds: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(x, y)`` item of ``ds``, stacked."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for k in range(len(ds)):
        item = ds[k]
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise DatasetError(f"{what}: item {k} is a {type(item).__name__}; expected an (x, y) pair")
        x = _numpy(item[0])
        if xs and x.shape != xs[0].shape:
            raise DatasetError(f"{what}: item {k} has features of shape {x.shape}, item 0 {xs[0].shape}")
        xs.append(x)
        ys.append(_numpy(item[1]))
    if not xs:
        return np.zeros((0,)), np.zeros((0,))
    return np.stack(xs), np.stack(ys)


def _dataset_bytes(ds: Any) -> int:
    if len(ds) == 0:
        return 0
    item = ds[0]
    first = _numpy(item[0]) if isinstance(item, tuple | list) and item else np.zeros(1)
    return len(ds) * (max(first.size, 1) * 4 + 8)  # float32 features, one target


def _arrays(i: int, entry: Any) -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_test, y_test)`` of client ``i``'s entry."""
    what = f"data of client {i}"
    if isinstance(entry, Mapping):
        unknown = [str(k) for k in sorted(set(entry) - {*ENTRY_KEYS, "features"}, key=str)]
        missing = [k for k in ENTRY_KEYS if k not in entry]
        if unknown or missing:
            raise DatasetError(
                f"{what}: a mapping needs the keys {', '.join(ENTRY_KEYS)} (and optionally features); "
                + (f"unknown: {', '.join(unknown)}" if unknown else f"missing: {', '.join(missing)}")
            )
        return tuple(_numpy(entry[k]) for k in ENTRY_KEYS)
    if not isinstance(entry, tuple | list) or len(entry) not in (2, 4):
        raise DatasetError(
            f"{what} is a {type(entry).__name__}; expected (x_train, y_train, x_test, y_test), "
            "(train_dataset, test_dataset) or a mapping with x, y, x_test, y_test and features"
        )
    if len(entry) == 4:
        return tuple(_numpy(a) for a in entry)
    train, test = entry
    for name, ds in (("train", train), ("test", test)):
        if not _is_dataset(ds):
            raise DatasetError(
                f"{what}: the {name} entry is a {type(ds).__name__}; expected a torch.utils.data.Dataset "
                "with a length (an IterableDataset cannot be read into the federation)"
            )
    return (*_read_dataset(train, f"{what} (train)"), *_read_dataset(test, f"{what} (test)"))


def _targets(y: np.ndarray, n: int, what: str) -> np.ndarray:
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != n:
        raise DatasetError(
            f"{what}: targets of shape {y.shape} for {n} samples; expected one per sample [{n}]"
        )
    if not (np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_):
        raise DatasetError(f"{what}: targets of type {y.dtype}; expected integer class ids or float values")
    return y


def from_objects(entries: Sequence[Any], name: str = "python") -> RawFederated:
    """A :class:`RawFederated` (fixed test splits, no reduction) from one entry per client (module
    docstring). Raises :class:`DatasetError` naming the client and the problem."""
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence) or len(entries) < 2:
        raise DatasetError(
            "data must be a list with one entry per client (at least 2): (x_train, y_train, x_test, y_test) "
            f"or (train_dataset, test_dataset); one pooled (x, y) with {setting('partition', 'dirichlet')}; "
            "or a mapping of the dataset's options "
            f"(e.g. {setting('data.relatedness', 0.5)})"
        )
    _check_memory(entries)
    clients, kinds = [], set()
    for i, entry in enumerate(entries):
        x, y, xt, yt = _object_client(i, entry)
        kinds |= {np.issubdtype(a.dtype, np.floating) for a in (y, yt) if len(a)}
        clients.append((x, y, xt.reshape(-1, *x.shape[1:]), yt))
    _check_tested(clients)
    if len(kinds) > 1:
        raise DatasetError(
            "data: some clients have integer targets (classification) and others floating-point targets "
            "(regression); give every client the same kind"
        )
    task: Task = "regression" if kinds == {True} else "classification"
    num_classes = 0
    if task == "classification":
        labels = np.concatenate([np.concatenate([c[1], c[3]]) for c in clients]).astype(np.int64)
        if labels.min() < 0:
            bad = next(i for i, c in enumerate(clients) if np.concatenate([c[1], c[3]]).min() < 0)
            raise DatasetError(f"data of client {bad}: negative class id; class ids must lie in 0..K-1")
        num_classes = max(int(labels.max()) + 1, 2)
    raw = raw_clients(clients, task)
    mappings = [e if isinstance(e, Mapping) else {} for e in entries]
    features = checked_feature_ids("data", mappings, [c[0] for c in clients], key="client {}'s features")
    return RawFederated(name, task, num_classes, raw, reduce=False, features=features)


def _check_memory(entries: Sequence[Any]) -> None:
    """Refuse clients' datasets that would not fit in the free memory (estimated from their first
    items), before any is read."""
    datasets = [
        d for e in entries if isinstance(e, tuple | list) and len(e) == 2 for d in e if _is_dataset(d)
    ]
    need, free = sum(_dataset_bytes(d) for d in datasets), _free_bytes()
    if datasets and free is not None and need > free:
        raise DatasetError(
            f"the clients' datasets hold about {need / 1e9:.1f} GB (from their first items) but "
            f"{free / 1e9:.1f} GB of memory are free; the federation holds every client's data in memory: "
            "give each client a torch.utils.data.Subset"
        )


def _object_client(i: int, entry: Any) -> tuple[np.ndarray, ...]:
    """``(x, y, x_test, y_test)`` of client ``i``'s entry, checked: training samples, one target per
    sample, test features shaped as the training ones, finite numbers."""
    x, y, xt, yt = _arrays(i, entry)
    what = f"data of client {i}"
    if x.ndim < 1 or len(x) == 0:
        raise DatasetError(f"{what}: no training samples")
    y, yt = _targets(y, len(x), f"{what} (train)"), _targets(yt, len(xt), f"{what} (test)")
    if xt.shape[1:] != x.shape[1:] and len(xt):
        raise DatasetError(f"{what}: test features of shape {xt.shape[1:]}, training features {x.shape[1:]}")
    for a, part in (
        (x, "training features"),
        (xt, "test features"),
        (y, "training targets"),
        (yt, "test targets"),
    ):
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise DatasetError(f"{what}: {part} of type {a.dtype}; expected a numeric array or tensor")
        if a.size and not np.all(np.isfinite(a.astype(np.float64))):
            raise DatasetError(f"{what}: NaN or infinite {part}")
    return x, y, xt, yt


def _check_tested(clients: Sequence[tuple[np.ndarray, ...]]) -> None:
    """Refuse clients none of which has test samples; warn of those without (left out of the mean)."""
    untested = [i for i, c in enumerate(clients) if len(c[2]) == 0]
    if len(untested) == len(clients):
        raise DatasetError("data: no client has test samples; the test metric needs a test split")
    if untested:  # counted honestly: the summary says over how many clients the mean is taken
        which = f"client{'s' if len(untested) > 1 else ''} {', '.join(map(str, untested[:10]))}"
        warnings.warn(
            f"data of {which}: no test samples, left out of the mean test metric (over "
            f"{len(clients) - len(untested)} of {len(clients)} clients)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
