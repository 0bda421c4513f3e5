"""The typed run configuration: :class:`RunConfig`, every key with its default (the key sections of
:mod:`.keys` and :mod:`.keys_run`), validated when it is built: each key's type, allowed values and
range (:mod:`.values`), then the rules that involve several keys (:mod:`.rules`), so one place
checks the configs of the CLI and of Python."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from ..component_keys import Keys, component_fields, declared, owner_of
from ..plugins import PLUGIN_KEYS, is_held, is_spec
from ..spelling import ANY, setting
from . import keys_callbacks as _declares_keys  # noqa: F401 - the loggers and early stopping declare their keys
from . import registry
from .errors import ConfigError, fix, shown
from .keys_silos import SiloKeys
from .renames import placement_renamed
from .rules import _check_together
from .value_checks import check_code, check_join_round, key_types, own_algorithm, registered_algorithm
from .values import _DEVICE, choices, range_of

KT = TypeVar("KT", bound=Keys)


@dataclass(frozen=True, init=False)
class RunConfig(SiloKeys):
    """Every setting of a run: the common keys (the sections of :mod:`.keys`, :mod:`.keys_run`,
    :mod:`.keys_silos`) and the keys each component declares beside its code
    (:mod:`sheaf_fmtl.component_keys`), given and read by their own names alike (a component reads
    its own typed, ``config.of(PartialKeys).personal_layers``). Invalid values raise
    :class:`ConfigError` in the constructor.

    Examples:
        >>> from sheaf_fmtl import ConfigError, RunConfig
        >>> config = RunConfig(dataset="school", lam=0.1)
        >>> config.dataset, config.lam, config.algorithm, config.rounds
        ('school', 0.1, 'sheaf-fmtl', 200)
        >>> try:
        ...     RunConfig(gamma=2.0)
        ... except ConfigError as refused:
        ...     print(refused)
        config key 'gamma' = 2.0 is out of range; allowed: 0 < gamma <= 1; e.g. gamma=0.3 (its default)
        >>> pfedme = RunConfig(algorithm="pfedme", inner_steps=3)
        >>> pfedme.inner_steps, pfedme.to_dict()["inner_steps"]
        (3, 3)
    """

    #: One instance of each declared class of keys (filled by the constructor, by class).
    components: dict[type[Keys], Keys] = field(default_factory=dict, repr=False, metadata={"internal": True})

    def __init__(self, components: Mapping[type[Keys], Keys] | None = None, **values: Any) -> None:
        registry.algorithm_names()  # every component has declared its keys once the registries are filled
        own_algorithm(values)
        common = common_fields()
        for name in values:
            if name not in common and owner_of(name) is None:
                raise ConfigError(_unknown_key(name, values[name]))
        for name, f in common.items():
            given = values[name] if name in values else _default_value(f)
            object.__setattr__(self, name, given)
        placement_renamed(self, str(common_fields()["placement"].default))
        for name in common:
            object.__setattr__(self, name, _check(name, getattr(self, name)))
        parts: dict[type[Keys], Keys] = {}
        for entry in declared():
            mine = {f.name: f for f in fields(entry.cls)}
            earlier = (components or {}).get(entry.cls)
            given = {n: getattr(earlier, n) for n in mine} if earlier is not None else {}
            given.update({n: values[n] for n in mine if n in values})
            parts[entry.cls] = entry.cls(**{n: _check(n, v) for n, v in given.items()})
        object.__setattr__(self, "components", parts)
        _check_together(self)
        for part in parts.values():
            part.check(self)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - a component's key of any type
        """A component's key by its own name (called only for names that are no common key)."""
        cls = owner_of(name)
        parts = self.__dict__.get("components")
        if cls is None or parts is None or cls not in parts:
            raise AttributeError(f"'RunConfig' object has no attribute {name!r}")
        return getattr(parts[cls], name)

    def of(self, cls: type[KT]) -> KT:
        """This config's keys of a component (a class :func:`~sheaf_fmtl.component_keys.declare_keys`
        registered), typed."""
        part = self.components[cls]
        assert isinstance(part, cls)
        return part

    @staticmethod
    def default_of(name: str) -> Any:  # noqa: ANN401 - a key of any type
        """Key ``name``'s default (:func:`default_of`)."""
        return default_of(name)

    def to_dict(self) -> dict[str, Any]:
        """Every key and its value, flat: the common keys, then each component's."""
        out = {name: copy.deepcopy(getattr(self, name)) for name in common_fields()}
        for part in self.components.values():
            out.update(dataclasses.asdict(part))
        return out

    @property
    def lam_value(self) -> float:
        """``lam`` as the run uses it: a config that leaves ``lam`` open (``null``) gets its mode's
        default when the run starts (``algorithms/maps/auto.py``); algorithms see only such configs."""
        if self.lam is None:
            raise ValueError("lam is open (null) until the run starts and resolves it")
        return self.lam

    @property
    def learns_maps(self) -> bool:
        """Whether Algorithm 1's map step (eq. (19) ``pijaupdate``) runs: ``maps = learned`` with
        ``eta > 0`` and ``lam > 0`` (``maps = fixed`` is the same algorithm with ``eta = 0``)."""
        return self.maps == "learned" and self.eta > 0 and (self.lam or 0.0) > 0

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, validated like any other config.

        Examples:
            >>> from sheaf_fmtl import ConfigError, RunConfig
            >>> config = RunConfig(dataset="school")
            >>> shorter = config.replace(rounds=5)
            >>> shorter.rounds, config.rounds, shorter.dataset
            (5, 200, 'school')
            >>> try:
            ...     config.replace(rouds=5)
            ... except ConfigError as refused:
            ...     print(refused)
            unknown config key 'rouds'; did you mean rounds=5?
        """
        unknown = sorted(set(changes) - known_keys())
        if unknown:
            raise ConfigError(_unknown_key(unknown[0], changes[unknown[0]]))
        return dataclasses.replace(self, **changes)


def _default_value(f: Field[Any]) -> Any:  # noqa: ANN401 - a key of any type
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def common_fields() -> dict[str, Field[Any]]:
    """The common record's keys (every field of :class:`RunConfig` but its components)."""
    return {f.name: f for f in fields(RunConfig) if not f.metadata.get("internal")}


def key_fields() -> dict[str, Field[Any]]:
    """Every key of a run by name: the common ones, then the components' (in the order declared)."""
    registry.algorithm_names()
    return {**common_fields(), **{f.name: f for f in component_fields()}}


def default_of(name: str) -> Any:  # noqa: ANN401 - a key of any type
    """Key ``name``'s default."""
    return _default_value(key_fields()[name])


def dict_keys() -> tuple[str, ...]:
    """Keys holding a mapping (sub-keys ``KEY.NAME=VALUE``)."""
    return tuple(name for name, f in key_fields().items() if key_types(str(f.type)) == (dict,))


def known_keys() -> set[str]:
    return set(key_fields())


# Keys a saved config.yaml carries besides the config (what produced it, the keys it set that the run
# did not read: config.usage); ignored when read back.
PROVENANCE_KEYS = ("versions", "unused")


def _unknown_key(key: object, value: Any = ANY) -> str:  # noqa: ANN401 - any config value
    """The refusal of an unknown key given ``value``: the closest known keys (``difflib``) given
    that value, in the user's spelling, when some are close, else every known key."""
    name = shown(str(key))[1:-1]
    close = difflib.get_close_matches(
        str(key).lower().replace("-", "_"), sorted(known_keys()), n=3, cutoff=0.6
    )
    if close:
        return f"unknown config key '{name}'; did you mean {' or '.join(setting(k, value) for k in close)}?"
    return f"unknown config key '{name}'; known keys: {', '.join(sorted(known_keys()))}"


def _fix(name: str) -> str:
    """The end of a refusal of key ``name``'s value (:func:`.errors.fix`)."""
    return fix(name, default_of(name))


def _check(name: str, value: Any) -> Any:
    """``value`` for key ``name``, normalised (ints to floats where floats are meant); or ConfigError."""
    f = key_fields()[name]
    if value is None and "None" in str(f.type):
        return None
    types = key_types(str(f.type))
    if name == "join_round" and isinstance(value, (list, tuple)):  # one round per client, as a list
        value = ",".join(str(v) for v in value)
    if float in types and isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if name == "data" and not isinstance(value, dict):
        raise ConfigError(
            "config key 'data' holds the dataset's options, as a mapping "
            f"(e.g. {setting('data.relatedness', 0.5)}); got {type(value).__name__} {shown(value)}"
        )
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types)
        got = f"got {type(value).__name__} {shown(value)}"
        raise ConfigError(f"config key '{name}': expected {want}, {got}{_fix(name)}")
    if float in types:
        value = float(value)  # type: ignore[arg-type]  # an int or float, checked above
        if not math.isfinite(value):
            raise ConfigError(f"config key '{name}' = {shown(value)} is not a finite number{_fix(name)}")
    if types == (dict,):
        return dict(value)
    if name in PLUGIN_KEYS:
        check_code(name, value, _fix(name))
        if is_held(value):
            return value
        if name == "algorithm" and is_spec(value):
            return registered_algorithm(value)
    if name == "map_init" and value == "zeros":
        raise ConfigError(
            "config key 'map_init' = zeros is rejected: zero restriction maps never learn "
            f"(paper Remark); allowed: {', '.join(choices(name) or ())}{_fix(name)}"
        )
    allowed = choices(name)
    if allowed is not None and value not in allowed:
        close = difflib.get_close_matches(str(value).lower(), allowed, n=1, cutoff=0.6)
        hint = f"did you mean {setting(name, close[0])}? " if close else ""
        raise ConfigError(
            f"config key '{name}': {shown(value)} is not allowed; {hint}allowed: {', '.join(allowed)}"
            + ("" if close else _fix(name))
        )
    if name == "join_round":
        check_join_round(value)
    if name == "device" and not _DEVICE.fullmatch(value):
        raise ConfigError(
            f"config key 'device': {shown(value)} is not allowed; allowed: cpu, cuda, cuda:N{_fix(name)}"
        )
    bounds = range_of(name)
    if bounds is not None:
        lo, lo_in, hi, hi_in, text = bounds
        bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
            hi is not None and (value > hi if hi_in else value >= hi)
        )
        if bad:
            raise ConfigError(
                f"config key '{name}' = {shown(value)} is out of range; allowed: {text}{_fix(name)}"
            )
    return value


def validate(config: RunConfig) -> RunConfig:
    """``config`` itself: a :class:`RunConfig` is validated when built (kept for callers)."""
    return config


def from_mapping(mapping: Mapping[str, Any]) -> RunConfig:
    """A validated config from a mapping of keys (a saved ``config.yaml``'s provenance is ignored);
    ``graph_file`` given without ``graph`` implies ``graph = file``."""
    values = {k: v for k, v in mapping.items() if k not in PROVENANCE_KEYS}
    own_algorithm(values)
    unknown = sorted(set(values) - known_keys(), key=str)
    if unknown:
        raise ConfigError(_unknown_key(unknown[0], values[unknown[0]]))
    if values.get("graph_file") and "graph" not in values:  # an edge list alone: the graph is that file
        values["graph"] = "file"
    return RunConfig(**values)
