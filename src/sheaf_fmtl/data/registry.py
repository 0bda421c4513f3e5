"""Dataset registry: ``name -> builder(request) -> RawFederated``; the protocol is applied here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import DatasetError, FederatedDataset, RawFederated
from .protocol import ProtocolOptions, apply_protocol


@dataclass(frozen=True)
class DataRequest:
    """What a run asks of a dataset."""

    clients: int | None = None  # None: the dataset's own number of clients
    seed: int = 0
    data_dir: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # dataset-specific knobs


Builder = Callable[[DataRequest], RawFederated]
_BUILDERS: dict[str, Builder] = {}


def register(name: str) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        _BUILDERS[name] = fn
        return fn

    return deco


def dataset_names() -> list[str]:
    _import_builtin()
    return sorted(_BUILDERS)


def load_raw(name: str, request: DataRequest) -> RawFederated:
    _import_builtin()
    if name.startswith("file:"):
        from .user import load_user

        raw = load_user(name[len("file:") :], request)
        return _take_clients(name, raw, request)
    if name not in _BUILDERS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(_BUILDERS))}")
    return _take_clients(name, _BUILDERS[name](request), request)


def _take_clients(name: str, raw: RawFederated, request: DataRequest) -> RawFederated:
    if request.clients is not None and request.clients != len(raw.clients):
        if request.clients > len(raw.clients):
            raise DatasetError(
                f"{name}: {request.clients} clients asked for, but the dataset has {len(raw.clients)}"
            )
        raw = RawFederated(raw.name, raw.task, raw.num_classes, raw.clients[: request.clients])
    return raw


def load(name: str, request: DataRequest, protocol: ProtocolOptions | None = None) -> FederatedDataset:
    """Read or generate ``name`` and split it by the paper's protocol."""
    return apply_protocol(load_raw(name, request), request.seed, protocol or ProtocolOptions())


def _import_builtin() -> None:
    from . import (  # noqa: F401  (each module registers its datasets)
        har,
        images,  # rmnist, hcifar10
        mocha,  # vehicle, gleam
        school,
        synthetic,  # synthetic, synthetic-hetero
    )
