"""One pooled labelled dataset ``(x, y)`` handed over in Python (:func:`sheaf_fmtl.run`'s ``data=``):
recognised (:func:`is_pooled`) and checked (:func:`pooled_from_objects`) before the config's
``partition`` splits it over the clients (:mod:`.partition`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import DatasetError, Pooled
from .user import _numpy, _targets


def is_pooled(data: Any) -> bool:
    """Whether ``data`` is one pooled dataset ``(x, y)``: two arrays or tensors (a per-client entry
    is a tuple, never an array)."""
    return isinstance(data, tuple | list) and len(data) == 2 and all(hasattr(a, "shape") for a in data)


def pooled_from_objects(data: Any, name: str = "data=(x, y)") -> Pooled:
    """A :class:`Pooled` dataset from ``(x, y)``: integer ``y`` (class ids ``0..K-1``) classify,
    floating-point ``y`` regress. Raises :class:`DatasetError` naming the problem."""
    x, y = _numpy(data[0]), _numpy(data[1])
    if x.ndim < 1 or len(x) < 2:
        raise DatasetError(f"{name}: x of shape {x.shape}; expected [n, ...] with n >= 2 samples")
    y = _targets(y, len(x), name)
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x.astype(np.float64))):
        raise DatasetError(f"{name}: x must be numeric and finite (dtype {x.dtype})")
    if not np.all(np.isfinite(y.astype(np.float64))):
        raise DatasetError(f"{name}: NaN or infinite targets")
    if np.issubdtype(y.dtype, np.floating):
        return Pooled(name, "regression", 0, x.astype(np.float32), y.astype(np.float32))
    if y.min() < 0:
        raise DatasetError(f"{name}: negative class id; class ids must lie in 0..K-1")
    labels = y.astype(np.int64)
    return Pooled(name, "classification", max(int(labels.max()) + 1, 2), x.astype(np.float32), labels)
