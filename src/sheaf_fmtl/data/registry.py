"""Dataset registry: ``name -> builder(request) -> RawFederated``; the protocol is applied here.

The top of the data layer: it imports every reader (each registers its datasets in
``base.READERS`` when imported) and ``protocol``; no reader imports it.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from ..plugins import call_with, first_line, is_held, is_spec, resolve
from ..spelling import setting
from ..warn import warn
from . import har, images, mocha, school, synthetic  # noqa: F401  (each registers its datasets)
from .base import READERS, DataRequest, DatasetError, FederatedDataset, Pooled, RawFederated
from .partition import POOLED_HELP, from_pool
from .protocol import ProtocolOptions, apply_protocol
from .sizes import check_generated
from .user import from_objects, load_user

__all__ = ["DataRequest", "dataset_files", "dataset_names", "load", "load_raw"]

USER_PREFIX = "file:"


def dataset_names() -> list[str]:
    """Every registered dataset (``file:PATH`` aside)."""
    return sorted(READERS)


def dataset_files() -> dict[str, tuple[str, ...]]:
    """The files that make each file-based dataset available (any one suffices), as each reader
    declares them; generated datasets are absent."""
    return {name: r.files for name, r in sorted(READERS.items()) if r.files}


def load_raw(name: str, request: DataRequest) -> RawFederated:
    """Read or generate ``name`` (a registered dataset or ``file:PATH``), before the protocol."""
    if request.partition.method != "none" and not (name in READERS and READERS[name].pooled):
        if not (is_held(name) and isinstance(resolve("dataset", name), Pooled)):
            shown = "your per-client data" if is_held(name) else name
            raise DatasetError(
                f"{setting('partition', request.partition.method)}: {shown} is already split per client; "
                f"a partition splits a pooled dataset ({POOLED_HELP}); give {setting('partition', 'none')}"
            )
    if name.startswith(USER_PREFIX):
        return _take_clients(name, load_user(name[len(USER_PREFIX) :], request), request)
    if is_spec(name) or is_held(name):
        return _take_clients(name, _from_code(name, request), request)
    if name not in READERS:
        known = ", ".join([*sorted(READERS), f"{USER_PREFIX}PATH"])
        if Path(name).expanduser().exists():  # a path without its prefix
            if (Path(name).expanduser() / "config.yaml").is_file():
                raise DatasetError(f"unknown dataset {name!r}: a run folder, not a dataset; known: {known}")
            raise DatasetError(
                f"unknown dataset {name!r}; your own data are named {USER_PREFIX}PATH "
                f"({USER_PREFIX}{name}); known: {known}"
            )
        raise DatasetError(f"unknown dataset {name!r}; known: {known}")
    check_generated(name, request.clients, dict(request.options))  # sizes first: a refusal in a second
    if not READERS[name].files and request.data_dir is not None and not Path(request.data_dir).is_dir():
        given = setting("data_dir", str(request.data_dir))
        warn(f"{given}: no such folder ({name} is generated and reads none)")
    return _take_clients(name, READERS[name].build(request), request)


def _from_code(name: str, request: DataRequest) -> RawFederated:
    """A dataset handed to :func:`sheaf_fmtl.run` (held, read already), or the per-client data a
    ``module:function`` returns (:mod:`.objects`), called with the ``data`` options as keyword
    arguments, ``seed`` (the run's) when it takes one and the options do not set it, and ``clients``
    (the global ids held here, a shard's read) when it takes one."""
    where = f"config key 'dataset' = '{name}'"
    obj = resolve("dataset", name)
    if isinstance(obj, Pooled):
        return from_pool(obj, request)
    if isinstance(obj, RawFederated):
        return obj
    named: dict[str, Any] = {} if "seed" in request.options else {"seed": request.seed}
    if request.held is not None and "clients" not in request.options:
        named["clients"] = list(request.held)  # taken by a function with clients=: only those, in order
    try:
        entries = call_with(functools.partial(obj, **request.options), (), named)
    except Exception as e:  # the user's function failed (or refused the options)
        raise DatasetError(f"{where} raised {type(e).__name__}: {first_line(e)}") from None
    if isinstance(entries, RawFederated):
        return entries
    try:
        return from_objects(entries, name.partition(":")[2])
    except DatasetError as e:
        raise DatasetError(f"{where} returned unusable data: {e}") from None


def _take_clients(name: str, raw: RawFederated, request: DataRequest) -> RawFederated:
    """The first ``clients`` of ``raw``; of those, with ``request.held``, only the held ones (a reader
    that read only those returned exactly them)."""
    held = request.held
    if held is not None and raw.ids is None:
        if request.clients is None:
            raise DatasetError(f"{name}: a read of some clients only needs {setting('clients', 'N')}")
        if len(raw.clients) == len(held) < request.clients:  # it read only the clients held here
            return dataclasses.replace(raw, ids=tuple(held), total=request.clients)
        if len(raw.clients) < request.clients:
            raise DatasetError(
                f"{name}: {len(raw.clients)} clients read for {setting('clients', request.clients)}, "
                f"{len(held)} of them held here: a function taking clients= returns one entry per id it "
                "is given, in order; other data need at least that many clients"
            )
        features = None if raw.features is None else tuple(raw.features[i] for i in held)
        return dataclasses.replace(
            raw,
            clients=tuple(raw.clients[i] for i in held),
            features=features,
            ids=held,
            total=request.clients,
        )
    if request.clients is not None and request.clients != len(raw.clients):
        if request.clients > len(raw.clients):
            raise DatasetError(
                f"{name}: config key 'clients' = {request.clients}, but the dataset has {len(raw.clients)} "
                f"clients; give {setting('clients', len(raw.clients))} or fewer, or leave clients out for all"
            )
        features = None if raw.features is None else raw.features[: request.clients]
        raw = dataclasses.replace(raw, clients=raw.clients[: request.clients], features=features)
    return raw


def load(name: str, request: DataRequest, protocol: ProtocolOptions | None = None) -> FederatedDataset:
    """Read or generate ``name`` and split it by the paper's protocol."""
    return apply_protocol(load_raw(name, request), request.seed, protocol or ProtocolOptions())
