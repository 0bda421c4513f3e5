"""Which keys a run reads: the keys that only some algorithms, map modes, graph kinds or training
protocols use, as data (:func:`read_by`), and the one rule for a key set to a non-default value that
the run ignores, wherever it comes from (``--set``, a flag, a config file, a :class:`RunConfig`,
Python keywords): one warning line naming it (a loop over algorithms with common keys runs), and
the key listed under ``unused:`` in the saved ``config.yaml`` (which reading ignores).

A selector still ``auto`` (a value resolved at start-up) decides nothing here: its keys are checked
once it is resolved (:func:`unused_keys` on the config the run was built with).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from types import SimpleNamespace
from typing import Any, cast

from ..component_keys import declared
from . import registry
from .errors import shown
from .schema import RunConfig, default_of, key_fields

# What selects whether a key is read, from a config: a name, and the config's value of it.
SELECTORS: dict[str, Callable[[RunConfig], str]] = {
    "algorithm": lambda c: registry.registered_name(c.algorithm),
    "maps": lambda c: c.maps if c.algorithm == "sheaf-fmtl" else f"none (algorithm={c.algorithm})",
    "graph": lambda c: c.graph,
    "local_epochs": lambda c: "0" if c.local_epochs == 0 else f"{c.local_epochs}",
    "compressor": lambda c: c.compressor,
    "partition": lambda c: c.partition,
    "graph_schedule": lambda c: c.graph_schedule,
    "transport": lambda c: c.transport,
}
#: Keys a mode reads that the config's rules refuse with any other mode (``rules._check_maps``).
_REFUSED_ELSEWHERE = ("estimates", "map_kind")


def read_by() -> dict[str, tuple[str, tuple[str, ...]]]:
    """key -> (selector, the selector's values that read the key): the map modes' and algorithms'
    keys as their registry entries list them (:mod:`.registry`), then graph kinds and protocols."""
    registry.algorithm_names()  # raises while the registries are empty (the algorithms not imported)
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for selector, specs in (("maps", registry.MAP_MODES), ("algorithm", registry.ALGORITHMS)):
        for spec in specs.values():
            for key in spec.reads:
                if key not in _REFUSED_ELSEWHERE:
                    readers = out.get(key, (selector, ()))[1]
                    out[key] = (selector, (*readers, spec.name))
    return {**out, **_COMMON_READERS, **_declared_readers()}


#: Common keys read by some training protocols only: key -> (selector, its values that read it).
_COMMON_READERS: dict[str, tuple[str, tuple[str, ...]]] = {"local_steps": ("local_epochs", ("0",))}


def _declared_readers() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The keys of the components that name a selector (:mod:`sheaf_fmtl.component_keys`), each
    with the selector's values that read it (the key's own, else its class's)."""
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for entry in declared():
        if entry.selector is None:
            continue
        for f in fields(entry.cls):
            out[f.name] = (entry.selector, tuple(f.metadata.get("readers", entry.readers)))
    return out


class UnusedKeysWarning(UserWarning):
    """A run's config sets keys the run does not read (:func:`unused_warning`)."""


def _defaults() -> dict[str, Any]:
    return {name: default_of(name) for name in key_fields()}


def unused_keys(config: RunConfig) -> list[str]:
    """The keys of ``config`` set to a non-default value that its run does not read (in
    :func:`read_by` order); none while a special case (``topology``) sets the maps' keys itself."""
    if config.topology != "none":
        return []
    out = []
    for key, (selector, readers) in read_by().items():
        value = SELECTORS[selector](config)
        if value != "auto" and value not in readers and getattr(config, key) != default_of(key):
            out.append(key)
    return out


def reads(config: Mapping[str, Any], key: str) -> bool:
    """Whether a run of ``config`` (a saved ``config.yaml``, as a mapping) reads ``key``: the keys of
    :func:`read_by` as their selectors say, ``maps`` with ``sheaf-fmtl`` only, any other key yes."""
    if config.get("topology", "none") != "none":
        return True  # a special case sets the maps' keys itself
    if key == "maps":
        return bool(config.get("algorithm", default_of("algorithm")) == "sheaf-fmtl")
    table = read_by()
    if key not in table:
        return True
    selector, readers = table[key]
    view = cast(RunConfig, SimpleNamespace(**{**_defaults(), **config}))
    value = SELECTORS[selector](view)
    return value == "auto" or value in readers


def describe(config: RunConfig, keys: list[str]) -> str:
    """``eta = 0.5 (read by maps=learned only)``, for the first of ``keys``, and the others named."""
    key = keys[0]
    selector, readers = read_by()[key]
    text = (
        f"'{key}' = {shown(getattr(config, key))} is not used with {selector}="
        f"{SELECTORS[selector](config)} (read with {selector}={' or '.join(readers)} only)"
    )
    return text + (f"; also unused: {', '.join(keys[1:])}" if len(keys) > 1 else "")


def unused_warning(config: RunConfig) -> str | None:
    """The warning for a run whose config sets keys the run ignores; ``None`` when it sets none."""
    keys = unused_keys(config)
    if not keys:
        return None
    return (
        f"config key {describe(config, keys)}: no effect on this run (its config.yaml lists "
        f"{'them' if len(keys) > 1 else 'it'} under 'unused')"
    )
