"""Copies of run state for resumable checkpoints: the data fields of a state object (tensors, lists
or tuples of tensors, numbers, flags) copied to the host, and put back on the run's device.

Structure that ``init`` rebuilds from the config (layouts, gossip index, the map store object) is
not data here: a resumed run rebuilds it and only the values are restored.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import torch

SCALARS: tuple[type, ...] = (bool, int, float, str, type(None))


def is_data(value: object) -> bool:
    """A tensor, a list or tuple of tensors, or a scalar (``None`` included)."""
    if isinstance(value, torch.Tensor) or isinstance(value, SCALARS):
        return True
    return isinstance(value, list | tuple) and all(isinstance(v, torch.Tensor) for v in value)


def host_copy(value: Any) -> Any:
    """``value`` with every tensor copied to the CPU (a fresh copy: later in-place updates of the
    run do not reach it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, list | tuple):
        return type(value)(host_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: host_copy(v) for k, v in value.items()}
    return value


def to_device(value: Any, device: torch.device | str) -> Any:
    """``value`` with every tensor moved to ``device`` (inverse of :func:`host_copy`)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def data_fields(obj: Any) -> dict[str, Any]:
    """Host copies of the data fields of the dataclass ``obj`` (see :func:`is_data`)."""
    assert is_dataclass(obj)
    return {f.name: host_copy(v) for f in fields(obj) if is_data(v := getattr(obj, f.name))}


def load_fields(obj: Any, saved: dict[str, Any], device: torch.device | str) -> None:
    """Set the fields of ``obj`` named in ``saved`` (from :func:`data_fields`) on ``device``."""
    known = {f.name for f in fields(obj)}
    unknown = sorted(set(saved) - known)
    if unknown:
        raise ValueError(f"checkpoint holds fields {unknown} that {type(obj).__name__} does not have")
    for name, value in saved.items():
        setattr(obj, name, to_device(value, device))
