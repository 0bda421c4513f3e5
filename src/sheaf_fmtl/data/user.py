"""``file:PATH`` -- the user's own federated data.

Two layouts: a per-client ``.npz`` (``num_clients``, ``x_i``,
``y_i``, optional ``x_test_i``/``y_test_i`` used as a fixed test split), or a folder with one CSV per
client (sorted by file name, last column the target, an optional non-numeric header row). The task
is inferred (integer targets with at most ``max_classes`` distinct values -> classification) or
forced with option ``task``. Clients may have different feature counts (the setting of the paper's
Section 5.2 with different model sizes). Option ``reduce=false`` turns off the protocol's "half of
the clients keep 20% of their training data" for users who bring their own split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .base import DataRequest, DatasetError, RawClient, RawFederated, Task
from .files import as_features, as_targets, check_options, read_npz_clients

#: ``reduce=false`` keeps every client's whole training split (no "half of the clients keep 20%").
USER_DEFAULTS: dict[str, Any] = {"task": None, "max_classes": 100, "reduce": True}
USER_KINDS = {"task": "str?"}


def _read_csv(path: Path) -> np.ndarray:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read ({e})") from e
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
            f"{_few(floats)} non-integer targets; fix the file, or set data.task=classification or "
            "data.task=regression"
        )


def _few(items: list[int]) -> str:
    return ", ".join(map(str, items[:5])) + (f" ... ({len(items)})" if len(items) > 5 else "")


def load_user(spec: str, request: DataRequest) -> RawFederated:
    """Build a :class:`RawFederated` from ``file:PATH`` (``spec`` is PATH)."""
    o = check_options(f"file:{spec}", request.options, USER_DEFAULTS, USER_KINDS)
    if o["task"] not in (None, "classification", "regression"):
        raise DatasetError(f"file:{spec}: option task must be 'classification' or 'regression'")
    path = Path(spec).expanduser()
    if not path.is_absolute() and request.data_dir is not None and not path.exists():
        path = Path(request.data_dir) / path
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".csv")
        if not files:
            raise DatasetError(f"{path}: folder has no .csv files (one per client expected)")
        parts = []
        for f in files:
            table = _read_csv(f)
            parts.append((f, {"x": table[:, :-1], "y": table[:, -1]}))
    elif path.is_file():
        parts = [(path, c) for c in read_npz_clients(path)]
    else:
        raise DatasetError(f"file:{spec}: {path} does not exist (give an .npz file or a folder of CSVs)")
    arrays = []
    for i, (src, c) in enumerate(parts):
        what = f"client {i}"
        x = as_features(c["x"], src, f"{what} features", allow_nd=True)
        y = as_targets(c["y"], src, f"{what} targets", len(x))
        xt = yt = None
        if "x_test" in c:
            xt = as_features(c["x_test"], src, f"{what} test features", allow_nd=True)
            yt = as_targets(c["y_test"], src, f"{what} test targets", len(xt))
            if xt.shape[1:] != x.shape[1:]:
                shapes = f"{xt.shape[1:]} (test) vs {x.shape[1:]} (train)"
                raise DatasetError(f"{src}: {what} feature shapes differ: {shapes}")
        arrays.append((x, y, xt, yt))
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
    ydt = np.int64 if task == "classification" else np.float32
    clients = tuple(
        RawClient(
            x.astype(np.float32),
            y.astype(ydt),
            None if xt is None else xt.astype(np.float32),
            None if yt is None else yt.astype(ydt),
        )
        for x, y, xt, yt in arrays
    )
    features = _feature_ids(spec, [c for _, c in parts], [a[0] for a in arrays])
    return RawFederated(
        f"file:{path.name}", task, num_classes, clients, reduce=o["reduce"], features=features
    )


def _feature_ids(
    spec: str, parts: list[dict[str, np.ndarray]], xs: list[np.ndarray]
) -> tuple[np.ndarray, ...] | None:
    """The clients' ``features_i`` (ids of their columns in one shared feature space), checked: all
    clients or none, one distinct non-negative integer per column."""
    given = ["features" in c for c in parts]
    if not any(given):
        return None
    if not all(given):
        missing = given.index(False)
        raise DatasetError(f"file:{spec}: features_i is given for some clients but not for client {missing}")
    out = []
    for i, (c, x) in enumerate(zip(parts, xs, strict=True)):
        f = np.asarray(c["features"])
        width = int(np.prod(x.shape[1:]))
        if f.ndim != 1 or not np.issubdtype(f.dtype, np.integer) or len(f) != width:
            raise DatasetError(
                f"file:{spec}: features_{i} must list one integer id per feature column ({width}), "
                f"got shape {f.shape} of {f.dtype}"
            )
        if len(np.unique(f)) != len(f) or (len(f) and f.min() < 0):
            raise DatasetError(f"file:{spec}: features_{i} must be distinct ids >= 0")
        out.append(f.astype(np.int64))
    return tuple(out)
