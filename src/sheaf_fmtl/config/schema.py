"""The typed run configuration: :class:`RunConfig`, every key with its default (the key sections of
:mod:`.keys` and :mod:`.keys_run`), validated when it is built: each key's type, allowed values and
range (:mod:`.values`), then the rules that involve several keys (:mod:`.rules`), so one place
checks the configs of the CLI and of Python."""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..plugins import PLUGIN_KEYS, PluginError, is_held, is_spec, load_spec
from ..spelling import ANY, on_command_line, setting
from ..warn import warn
from .errors import ConfigError, fix, shown
from .keys_silos import SiloKeys
from .rules import _check_together
from .values import _CHOICES, _DEVICE, _RANGES, MAX_JOIN_ROUND, PLACEMENTS, choices, join_round_values


@dataclass(frozen=True)
class RunConfig(SiloKeys):
    """Every setting of a run; invalid values raise :class:`ConfigError` in the constructor.

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
    """

    def __post_init__(self) -> None:
        _placement_renamed(self)
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))
        _check_together(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def lam_value(self) -> float:
        """``lam`` as the run uses it: a config that leaves ``lam`` open (``null``) gets its mode's
        default when the run starts (``algorithms/auto_maps.py``); algorithms see only such configs."""
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
        unknown = sorted(set(changes) - _KNOWN)
        if unknown:
            raise ConfigError(_unknown_key(unknown[0], changes[unknown[0]]))
        return dataclasses.replace(self, **changes)


def _placement_renamed(config: RunConfig) -> None:
    """``partition = contiguous | community`` (the former name of ``placement``, as old configs and
    run folders' ``config.yaml`` hold it) read as ``placement``, with one warning."""
    old = config.partition
    if old not in PLACEMENTS:
        return
    given = config.placement
    if given not in (old, RunConfig.__dataclass_fields__["placement"].default):
        raise ConfigError(
            f"config key 'partition' = {old} is the former name of 'placement', which is given as {given}; "
            f"give {setting('placement', old)} or {setting('placement', given)} alone"
        )
    warn(
        f"config key 'partition' = {old} is read as {setting('placement', old)} (renamed; 'partition' now "
        "splits a pooled dataset over the clients); write placement",
        FutureWarning,
    )
    object.__setattr__(config, "placement", old)
    object.__setattr__(config, "partition", "none")


def renamed_keys(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded config (a run folder's ``config.yaml``, a cell's ``cell.json``) with its former key
    names as they read now: ``partition = contiguous | community`` as ``placement`` (no warning)."""
    out = dict(mapping)
    if out.get("partition") in PLACEMENTS:
        out["placement"] = out.pop("partition")
    return out


def _types(annotation: str) -> tuple[type, ...]:
    if annotation.startswith("int"):
        return (int,)
    if annotation.startswith("float"):
        return (int, float)
    if annotation.startswith("bool"):
        return (bool,)
    return (dict,) if annotation.startswith("dict") else (str,)


_TYPES: dict[str, tuple[type, ...]] = {f.name: _types(str(f.type)) for f in fields(RunConfig)}
_OPTIONAL = {f.name for f in fields(RunConfig) if "None" in str(f.type)}
_KNOWN = set(_TYPES)
#: Keys holding a mapping (sub-keys ``KEY.NAME=VALUE``).
DICT_KEYS = tuple(name for name, types in _TYPES.items() if types == (dict,))
# Keys a saved config.yaml carries besides the config (what produced it, the keys it set that the run
# did not read: config.usage); ignored when read back.
PROVENANCE_KEYS = ("versions", "unused")


def _unknown_key(key: object, value: Any = ANY) -> str:  # noqa: ANN401 - any config value
    """The refusal of an unknown key given ``value``: the closest known keys (``difflib``) given
    that value, in the user's spelling, when some are close, else every known key."""
    name = shown(str(key))[1:-1]
    close = difflib.get_close_matches(str(key).lower().replace("-", "_"), sorted(_KNOWN), n=3, cutoff=0.6)
    if close:
        return f"unknown config key '{name}'; did you mean {' or '.join(setting(k, value) for k in close)}?"
    return f"unknown config key '{name}'; known keys: {', '.join(sorted(_KNOWN))}"


def _fix(name: str) -> str:
    """The end of a refusal of key ``name``'s value (:func:`.errors.fix`)."""
    return fix(name, RunConfig.__dataclass_fields__[name].default)


def _check(name: str, value: Any) -> Any:
    """``value`` for key ``name``, normalised (ints to floats where floats are meant); or ConfigError."""
    if value is None and name in _OPTIONAL:
        return None
    types = _TYPES[name]
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
    if name in DICT_KEYS:
        return dict(value)
    if name in PLUGIN_KEYS:
        _check_code(name, value)
        if is_held(value):
            return value
    if name == "map_init" and value == "zeros":
        raise ConfigError(
            "config key 'map_init' = zeros is rejected: zero restriction maps never learn "
            f"(paper Remark); allowed: {', '.join(_CHOICES[name])}{_fix(name)}"
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
        _check_join_round(value)
    if name == "device" and not _DEVICE.fullmatch(value):
        raise ConfigError(
            f"config key 'device': {shown(value)} is not allowed; allowed: cpu, cuda, cuda:N{_fix(name)}"
        )
    if name in _RANGES:
        lo, lo_in, hi, hi_in, text = _RANGES[name]
        bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
            hi is not None and (value > hi if hi_in else value >= hi)
        )
        if bad:
            raise ConfigError(
                f"config key '{name}' = {shown(value)} is out of range; allowed: {text}{_fix(name)}"
            )
    return value


def _check_join_round(value: str) -> None:
    """``join_round``'s spelling and numbers (its count per client is checked against the clients
    once they are known, :func:`sheaf_fmtl.runtime.engine.schedule.join_rounds`)."""
    try:
        join_round_values(value)
    except ValueError:
        raise ConfigError(
            f"config key 'join_round' = {shown(value)} is not allowed; allowed: one first round per "
            "client (comma-separated) or late:K@R (K clients join at round R), each number a whole one "
            f"from 0 to {MAX_JOIN_ROUND} (2^63 - 1), e.g. {setting('join_round', 'late:2@50')}"
        ) from None


def _check_code(name: str, value: str) -> None:
    """Import the ``module:function`` a key names (config keys naming user code, ``plugins``)."""
    for part in value.split(",") if name == "model" else [value]:
        if is_spec(part.strip()):
            try:
                load_spec(name, part.strip())
            except PluginError as e:
                raise ConfigError(str(e)) from None
    if name in ("loss", "metric") and value != "auto" and not is_spec(value) and not is_held(value):
        raise ConfigError(
            f"config key '{name}': {shown(value)} is not allowed; allowed: auto, or module:function "
            + (
                f"(your own, e.g. {setting(name, f'mypkg.code:my_{name}')})"
                if on_command_line()
                else f"or a function (your own, e.g. {name}=my_{name})"
            )
            + _fix(name)
        )
    if name == "transform" and value not in ("none", "random-crop-flip") and not is_spec(value):
        if not is_held(value):
            raise ConfigError(
                f"config key 'transform': {shown(value)} is not allowed; allowed: none, random-crop-flip, or "
                + (
                    f"module:function (e.g. {setting(name, 'mypkg.aug:flip')})"
                    if on_command_line()
                    else "a callable on a batched tensor (e.g. transform=v2.RandomHorizontalFlip())"
                )
            )


def validate(config: RunConfig) -> RunConfig:
    """``config`` itself: a :class:`RunConfig` is validated when built (kept for callers)."""
    return config


def from_mapping(mapping: Mapping[str, Any]) -> RunConfig:
    """A validated config from a mapping of keys (a saved ``config.yaml``'s provenance is ignored);
    ``graph_file`` given without ``graph`` implies ``graph = file``."""
    values = {k: v for k, v in mapping.items() if k not in PROVENANCE_KEYS}
    unknown = sorted(set(values) - _KNOWN, key=str)
    if unknown:
        raise ConfigError(_unknown_key(unknown[0], values[unknown[0]]))
    if values.get("graph_file") and "graph" not in values:  # an edge list alone: the graph is that file
        values["graph"] = "file"
    return RunConfig(**values)
