"""Per-client data handed over as Python objects (:func:`sheaf_fmtl.run`'s ``data=``, or what a
``dataset: module:function`` returns): one entry per client, either arrays or tensors
``(x_train, y_train, x_test, y_test)`` or a pair of ``torch.utils.data.Dataset`` ``(train, test)``
whose items are ``(x, y)``.

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
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import DatasetError, RawClient, RawFederated, Task


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
    if not isinstance(entry, tuple | list) or len(entry) not in (2, 4):
        raise DatasetError(
            f"{what} is a {type(entry).__name__}; expected (x_train, y_train, x_test, y_test) "
            "or (train_dataset, test_dataset)"
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
            "or (train_dataset, test_dataset)"
        )
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
    clients, kinds = [], set()
    for i, entry in enumerate(entries):
        x, y, xt, yt = _arrays(i, entry)
        what = f"data of client {i}"
        if x.ndim < 1 or len(x) == 0:
            raise DatasetError(f"{what}: no training samples")
        y, yt = _targets(y, len(x), f"{what} (train)"), _targets(yt, len(xt), f"{what} (test)")
        if xt.shape[1:] != x.shape[1:] and len(xt):
            raise DatasetError(
                f"{what}: test features of shape {xt.shape[1:]}, training features {x.shape[1:]}"
            )
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
        kinds |= {np.issubdtype(a.dtype, np.floating) for a in (y, yt) if len(a)}
        clients.append((x, y, xt.reshape(-1, *x.shape[1:]), yt))
    untested = [i for i, c in enumerate(clients) if len(c[2]) == 0]
    if len(untested) == len(clients):
        raise DatasetError("data: no client has test samples; the test metric needs a test split")
    if untested:  # counted honestly: the summary says over how many clients the mean is taken
        which = f"client{'s' if len(untested) > 1 else ''} {', '.join(map(str, untested[:10]))}"
        warnings.warn(
            f"data of {which}: no test samples, left out of the mean test metric (over "
            f"{len(clients) - len(untested)} of {len(clients)} clients)",
            UserWarning,
            stacklevel=2,
        )
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
    ydt = np.int64 if task == "classification" else np.float32
    raw = tuple(
        RawClient(x.astype(np.float32), y.astype(ydt), xt.astype(np.float32), yt.astype(ydt))
        for x, y, xt, yt in clients
    )
    return RawFederated(name, task, num_classes, raw, reduce=False)
