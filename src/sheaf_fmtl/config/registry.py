"""The registries of algorithms and map modes: what the rest of the package knows of each one (its
name in figures, its colour, the keys it reads, its step keys, its server's FLOPs, a map mode's
default ``lam`` and label), kept with the one entry that registers it.

Config sits below the algorithms in the package's layers, so it holds these facts as data that
the algorithms package fills as it is imported (``algorithms.base.register`` and
``register_maps``, beside each implementation). A lookup imports that package first
(:func:`_filled`), so a config names only registered algorithms and modes wherever it is read,
before any data is loaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: ``(config, model dimension, clients, half-edges) -> FLOPs`` of one round's model combinations.
AggregationFlops = Callable[[Any, int, int, int], int]


@dataclass(frozen=True)
class AlgorithmSpec:
    """What the package knows of an algorithm besides its code.

    Attributes:
        name: the ``algorithm`` key's value.
        display: its name in figures and tables (``dFedU``).
        step_keys: the keys whose size makes its iterates blow up, in the order to try them.
        reads: the keys only some algorithms read that this one does (``lam``: it has a coupling
            strength).
        color: an index into the figures' palette, or ``None`` for the palette's cycle.
        divergence_hint: appended to the divergence message (a step-size condition).
        aggregation: FLOPs of a round's model combinations (``None``: none).
    """

    name: str
    display: str
    step_keys: tuple[str, ...] = ("alpha",)
    reads: tuple[str, ...] = ()
    color: int | None = None
    divergence_hint: str = ""
    aggregation: AggregationFlops | None = None


@dataclass(frozen=True)
class MapModeSpec:
    """What the package knows of a map mode of ``algorithm = sheaf-fmtl`` besides its code.

    Attributes:
        name: the ``maps`` key's value.
        label: its words in figure legends.
        default_lam: ``lam`` when the config leaves it open (``null``) and the mode has no ``pull``.
        pull: the mode's default strength as dFedU's would be, ``lam q`` (``q``: the fraction of the
            support a round couples); ``lam = null`` then resolves to ``min(pull / q, 1 / (alpha
            lambda_S))`` (``algorithms/coupling_strength.py``; ``inf``: that averaging step).
        reads: the keys only some modes read that this one does (``gamma``, ``map_kind`` and
            ``estimates`` are named in its label).
        builds_maps: it builds its own maps (no special case's fixed maps: ``topology = none``).
    """

    name: str
    label: str
    default_lam: float
    reads: tuple[str, ...] = field(default=())
    pull: float | None = None
    builds_maps: bool = True


ALGORITHMS: dict[str, AlgorithmSpec] = {}
MAP_MODES: dict[str, MapModeSpec] = {}
#: ``maps = auto``: one of the registered modes, chosen at start-up (``algorithms/auto_maps.py``).
AUTO = "auto"


def add_algorithm(spec: AlgorithmSpec) -> None:
    """Register ``spec`` (the algorithms package does, beside the implementation); ValueError naming
    the entry for a spec of the wrong type or fields, or a name registered already."""
    _check_spec(spec, AlgorithmSpec, ALGORITHMS, "algorithm")
    _check_fields(spec, display=str, step_keys=tuple, reads=tuple, divergence_hint=str)
    if spec.color is not None and type(spec.color) is not int:
        raise ValueError(f"algorithm '{spec.name}': color = {spec.color!r}; give a palette index or None")
    if spec.aggregation is not None and not callable(spec.aggregation):
        raise ValueError(f"algorithm '{spec.name}': aggregation must be a function or None")
    ALGORITHMS[spec.name] = spec


def add_map_mode(spec: MapModeSpec) -> None:
    """Register ``spec`` (the algorithms package does, beside the implementation); ValueError as
    :func:`add_algorithm` (``auto`` is taken: it picks among the modes)."""
    _check_spec(spec, MapModeSpec, {**MAP_MODES, AUTO: None}, "map mode")
    _check_fields(spec, label=str, reads=tuple, builds_maps=bool)
    for key in ("default_lam", "pull"):
        value = getattr(spec, key)
        if (value is not None or key == "default_lam") and not (
            isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        ):
            raise ValueError(f"map mode '{spec.name}': {key} = {value!r}; give a number >= 0")
    MAP_MODES[spec.name] = spec


def _check_spec(spec: object, kind: type, taken: dict[str, Any], what: str) -> None:
    if not isinstance(spec, kind):
        raise ValueError(f"register a {what} with a {kind.__name__}, not {type(spec).__name__}")
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not name or any(c.isspace() or c in ",=:" for c in name):
        raise ValueError(f"{what} name {name!r}: give a non-empty name without spaces, ',', '=' or ':'")
    if name in taken:
        raise ValueError(f"{what} '{name}' is registered already; give another name")


def _check_fields(spec: Any, **types: type) -> None:  # noqa: ANN401 - a spec dataclass
    for key, kind in types.items():
        value = getattr(spec, key)
        if kind is tuple:
            ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        else:
            ok = isinstance(value, kind)
        if not ok:
            shown = "a tuple of key names" if kind is tuple else kind.__name__
            raise ValueError(f"{spec.name}: {key} = {value!r:.60}; give {shown}")


def _filled() -> None:
    """Import the algorithms package (which registers every built-in entry) on a first lookup."""
    if not ALGORITHMS:
        importlib.import_module("sheaf_fmtl.algorithms")


def algorithm_names() -> tuple[str, ...]:
    _filled()
    return tuple(ALGORITHMS)


def map_mode_names() -> tuple[str, ...]:
    """``auto``, then every registered mode."""
    _filled()
    return (AUTO, *MAP_MODES)


def algorithm_spec(name: str) -> AlgorithmSpec | None:
    _filled()
    return ALGORITHMS.get(name)


def map_mode_spec(name: str) -> MapModeSpec | None:
    _filled()
    return MAP_MODES.get(name)
