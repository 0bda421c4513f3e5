"""The registries of algorithms and map modes: what the rest of the package knows of each one (its
name in figures, its colour, the keys it reads, its step keys, its server's FLOPs, a map mode's
default ``lam`` and label), kept with the one entry that registers it.

Config sits below the algorithms in the package's layers, so it holds these facts as data that
the algorithms package fills as it is imported (``algorithms.protocol.algorithm.register`` and
``register_maps``, beside each implementation), and it reads them as they are: nothing in config
imports the algorithms, by name or by string (``tests/test_layering.py`` reads both). The first
lookup fills them through the package root's ``fill_registries`` (the root is imported before any
module of the package, and imports the algorithms package when asked), so ``from
sheaf_fmtl.config import RunConfig; RunConfig()`` works as ``sheaf_fmtl.RunConfig()`` does.
Importing any module of the algorithms package registers every built-in entry; a lookup that
still finds no algorithm raises (:data:`NOT_FILLED`) rather than finding no choices.

Why no list of the built-in names in a module without torch: no place needs the choices without
it. ``sheaf-fmtl --help`` and each command's ``--help`` read no config, and reading a config
imports torch anyway (``sheaf.maps``). Such a list would be a second copy of the entries' names and
one more file to edit for a new algorithm or map mode.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..component_keys import Keys, declare_keys, declared
from ..plugins import PluginError, is_spec, load_spec

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
        keys: its own keys, declared beside it (:mod:`sheaf_fmtl.component_keys`): a run of this
            algorithm reads them (they join ``reads`` when it is registered).
    """

    name: str
    display: str
    step_keys: tuple[str, ...] = ("alpha",)
    reads: tuple[str, ...] = ()
    color: int | None = None
    divergence_hint: str = ""
    aggregation: AggregationFlops | None = None
    keys: tuple[type[Keys], ...] = ()


@dataclass(frozen=True)
class MapModeSpec:
    """What the package knows of a map mode of ``algorithm = sheaf-fmtl`` besides its code.

    Attributes:
        name: the ``maps`` key's value.
        label: its words in figure legends.
        default_lam: ``lam`` when the config leaves it open (``null``) and the mode has no ``pull``.
        pull: the mode's default strength as dFedU's would be, ``lam q`` (``q``: the fraction of the
            support a round couples); ``lam = null`` then resolves to ``min(pull / q, 1 / (alpha
            lambda_S))`` (``algorithms/training/coupling_strength.py``; ``inf``: that averaging step).
        reads: the keys only some modes read that this one does (``gamma``, ``map_kind`` and
            ``estimates`` are named in its label).
        builds_maps: it builds its own maps (no special case's fixed maps: ``topology = none``).
        idle_as: the mode it runs as when its maps do not move (``eta`` or ``lam`` is 0): figures
            label such a run as that mode.
        unrecorded: a recorded config without the ``maps`` key ran this mode (it was written
            before the key existed).
        learns_weights: ``edge_weights = auto`` learns each edge's weight from the exchange
            (``relatedness``) rather than taking the graph's.
        keys: its own keys, declared beside it (they join ``reads`` when it is registered).
    """

    name: str
    label: str
    default_lam: float
    reads: tuple[str, ...] = field(default=())
    pull: float | None = None
    builds_maps: bool = True
    idle_as: str | None = None
    unrecorded: bool = False
    learns_weights: bool = True
    keys: tuple[type[Keys], ...] = ()


ALGORITHMS: dict[str, AlgorithmSpec] = {}
MAP_MODES: dict[str, MapModeSpec] = {}
#: ``maps = auto``: one of the registered modes, chosen at start-up (``algorithms/maps/auto.py``).
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
    ALGORITHMS[spec.name] = _with_keys(spec, f"algorithm {spec.name}")


def add_map_mode(spec: MapModeSpec) -> None:
    """Register ``spec`` (the algorithms package does, beside the implementation); ValueError as
    :func:`add_algorithm` (``auto`` is taken: it picks among the modes)."""
    _check_spec(spec, MapModeSpec, {**MAP_MODES, AUTO: None}, "map mode")
    _check_fields(spec, label=str, reads=tuple, builds_maps=bool, learns_weights=bool)
    for key in ("default_lam", "pull"):
        value = getattr(spec, key)
        if (value is not None or key == "default_lam") and not (
            isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        ):
            raise ValueError(f"map mode '{spec.name}': {key} = {value!r}; give a number >= 0")
    MAP_MODES[spec.name] = _with_keys(spec, f"maps {spec.name}")


def _with_keys(spec: Any, component: str) -> Any:  # noqa: ANN401 - an AlgorithmSpec or MapModeSpec
    """``spec`` reading its own keys: each class of ``spec.keys`` declared (by the first entry that
    lists it), its keys added to ``reads``."""
    own: list[str] = []
    for cls in spec.keys:
        if not (isinstance(cls, type) and issubclass(cls, Keys)):
            raise ValueError(f"{spec.name}: keys = {spec.keys!r}; give classes of Keys")
        earlier = next((entry for entry in declared() if entry.cls is cls), None)
        kind, _, name = component.partition(" ")
        if earlier is None:
            declare_keys(component)(cls)
        elif earlier.component.startswith(kind + " "):  # read by several entries: each named
            declare_keys(f"{earlier.component}, {name}")(cls)
        own += [f.name for f in dataclasses.fields(cls) if f.name not in spec.reads]
    return dataclasses.replace(spec, reads=(*spec.reads, *own)) if own else spec


#: Why a lookup finds nothing: no module has imported the algorithms package yet.
NOT_FILLED = (
    "no algorithm is registered, and the package root (sheaf_fmtl) could not fill the registries: "
    "import sheaf_fmtl.algorithms before reading a config"
)


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
    """Fill the registries on the first lookup, then raise unless they hold an algorithm
    (:data:`NOT_FILLED`): ``from sheaf_fmtl.config import RunConfig; RunConfig()`` works."""
    if not _ASKED:
        _ASKED.append(True)  # (once: a lookup while the algorithms import does not start it again)
        _fill()
    if not ALGORITHMS:
        raise RuntimeError(NOT_FILLED)


_ASKED: list[bool] = []  # the root was asked to fill the registries (an entry of the user's may come first)


def _fill() -> None:
    """Ask the package root to fill the registries: Python imports it before any of its modules, so
    it is always there, and it knows the algorithms package (this module names neither: it sits
    below them). A root without the hook (a partial copy of the package) fills nothing."""
    root = sys.modules.get(__name__.partition(".")[0])
    fill = getattr(root, "fill_registries", None)
    if callable(fill):
        fill()


def algorithm_names() -> tuple[str, ...]:
    _filled()
    return tuple(ALGORITHMS)


def map_mode_names() -> tuple[str, ...]:
    """``auto``, then every registered mode."""
    _filled()
    return (AUTO, *MAP_MODES)


def algorithm_spec(name: str) -> AlgorithmSpec | None:
    """The entry of ``algorithm = name`` (a registered name, or the ``module:Class`` of your own
    algorithm, :func:`registered_name`)."""
    _filled()
    return ALGORITHMS.get(registered_name(name))


def registered_name(value: str) -> str:
    """``algorithm``'s value as the registry names it: a ``module:Class`` (your own algorithm in
    its own file, registered with ``@register`` as its module is imported) gives the name it was
    registered under; any other value as it is. :class:`~sheaf_fmtl.plugins.PluginError` when the
    module cannot be imported or the class was not registered."""
    if not is_spec(value):
        return value
    cls = load_spec("algorithm", value)
    name = getattr(cls, "registered_as", None)
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise PluginError(
            f"config key 'algorithm' = '{value}' names {getattr(cls, '__name__', cls)!r}, which no @register "
            "registered; decorate the class with the algorithms' @register(NAME, ...)"
        )
    return name


def map_mode_spec(name: str) -> MapModeSpec | None:
    _filled()
    return MAP_MODES.get(name)


def unrecorded_map_mode() -> str | None:
    """The mode a recorded config without the ``maps`` key ran (:attr:`MapModeSpec.unrecorded`)."""
    _filled()
    return next((spec.name for spec in MAP_MODES.values() if spec.unrecorded), None)


def edge_weights_of(config: Any) -> str:
    """The ``edge_weights`` a run of ``config`` (a ``RunConfig``) couples with: ``auto`` reads its
    map mode's entry (:attr:`MapModeSpec.learns_weights`: ``relatedness``, else ``graph``; ``graph``
    for a mode that reads no edge weights, and for redrawn maps that select no coordinates,
    ``map_kind`` other than ``selection``); a named value as given."""
    if config.edge_weights != AUTO:
        return str(config.edge_weights)
    spec = map_mode_spec(config.maps)
    if spec is None or not spec.learns_weights or "edge_weights" not in spec.reads:
        return "graph"
    return "graph" if config.maps == "redrawn" and config.map_kind != "selection" else "relatedness"
