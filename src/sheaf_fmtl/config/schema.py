"""The typed run configuration: :class:`RunConfig`, every key with its default, validated when it
is built (types, allowed values, ranges, rules that involve several keys), so one place checks the
configs of the CLI and of Python."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..sheaf.graph import GRAPH_KINDS
from ..sheaf.maps import MAP_DTYPES, MAP_INITS


class ConfigError(ValueError):
    """One line naming the key and the allowed values."""


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a run; invalid values raise :class:`ConfigError` in the constructor."""

    algorithm: str = "sheaf-fmtl"
    dataset: str = "synthetic-hetero"
    model: str = "auto"
    clients: int | None = None  # None: the dataset's own number of clients
    graph: str = "erdos-renyi"
    graph_p: float = 0.2
    graph_k: int = 4
    graph_m: int = 2
    graph_file: str = ""
    topology: str = "none"  # none, or a special case of the paper (sheaf_fmtl.scenarios.TOPOLOGIES)
    rounds: int = 200
    batch_size: int = 32  # 0: full local data (deterministic gradients)
    local_steps: int = 1
    local_epochs: int = 0  # E > 0: E passes of mini-batch SGD over each client's data per round
    init: str = "common"  # common: one initial model per architecture; per-client: one draw each
    lam: float = 0.01
    alpha: float = 0.05
    eta: float = 0.01
    gamma: float = 0.3
    map_init: str = "gaussian"
    map_scale: float | None = None  # None: auto (gaussian sigma = 1/sqrt(d_i), ...); see sheaf.maps
    map_dtype: str = "float32"
    shared_maps: bool = True  # both maps of an edge between equal-size models start equal
    map_draw: str = "host"  # host: per-map CPU draws (same maps on every device); device: per bucket there
    message_mode: str = "compact"
    map_defer: int = -1  # rounds between folds of the rank-one map steps (-1 auto, 1 = every round)
    l2: float = 1e-4
    standardize: bool = True
    validation: float = 0.0  # > 0: hold out this fraction of each client's training data, evaluate on it
    seed: int = 0
    eval_every: int = 10
    checkpoint_every: int = -1  # rounds between resumable checkpoints (-1: every evaluation; 0: none)
    save_maps: bool = True  # write the final restriction maps into checkpoint.pt (GBs at paper scale)
    stability_check: bool = True  # refuse alpha*lam*lambda_max(L) >= 2 at start-up (power iteration)
    drop_prob: float = 0.0  # simulated faults: a client misses a round with this probability
    link_drop_prob: float = 0.0  # ... a message along a link is lost (runtime/faults.py)
    processes: int = 1  # > 1: run the clients in this many local processes (runtime/distributed.py)
    partition: str = "contiguous"  # clients over processes: contiguous blocks, or community (fewer cut edges)
    timeout_s: float = 60.0  # processes: a peer silent this long ends the run (one line naming it)
    data_dir: str = ""
    data_search: bool = False
    device: str = "cpu"
    data: dict[str, Any] = field(default_factory=dict)  # dataset-specific options
    # Baselines (algorithms/*.py); see each algorithm's docstring.
    dpsgd_order: str = "lian"  # lian: x <- W x - alpha g(x); atc: x <- W (x - alpha g(x))
    inner_steps: int = 5  # pFedMe: gradient steps of the inner (Moreau envelope) solve
    inner_lr: float = 0.05  # pFedMe: step size of the inner solve
    pfedme_beta: float = 1.0  # pFedMe: server mixing w <- (1 - beta) w + beta mean_i w_i
    perfedavg_beta: float = 0.01  # Per-FedAvg: meta (outer) step size; alpha is the adaptation step

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))
        _check_together(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, validated like any other config."""
        unknown = sorted(set(changes) - _KNOWN)
        if unknown:
            raise ConfigError(_unknown_key(unknown[0]))
        return dataclasses.replace(self, **changes)


_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_CHOICES: dict[str, tuple[str, ...]] = {
    "graph": GRAPH_KINDS,
    "map_init": MAP_INITS,
    "map_dtype": tuple(MAP_DTYPES),
    "message_mode": ("compact", "literal"),
    "dpsgd_order": ("lian", "atc"),
    "init": ("common", "per-client"),
    "map_draw": ("host", "device"),
    "partition": ("contiguous", "community"),
    "topology": ("none", "conventional-fmtl", "personalised-fl", "hybrid-fl"),
}
# key -> (lower, lower inclusive, upper, upper inclusive, text)
_RANGES: dict[str, tuple[float | None, bool, float | None, bool, str]] = {
    "clients": (2, True, None, False, "clients >= 2"),
    "graph_p": (0.0, False, 1.0, True, "0 < graph_p <= 1"),
    "graph_k": (2, True, None, False, "graph_k >= 2"),
    "graph_m": (1, True, None, False, "graph_m >= 1"),
    "rounds": (1, True, None, False, "rounds >= 1"),
    "batch_size": (0, True, None, False, "batch_size >= 0 (0 = full batch)"),
    "local_steps": (1, True, None, False, "local_steps >= 1"),
    "local_epochs": (0, True, None, False, "local_epochs >= 0 (0 = local_steps steps per round)"),
    "lam": (0.0, True, None, False, "lam >= 0"),
    "alpha": (0.0, False, None, False, "alpha > 0"),
    "eta": (0.0, True, None, False, "eta >= 0"),
    "gamma": (0.0, False, 1.0, True, "0 < gamma <= 1"),
    "map_scale": (0.0, True, None, False, "map_scale >= 0"),
    "l2": (0.0, True, None, False, "l2 >= 0"),
    "map_defer": (-1, True, None, False, "map_defer >= -1 (-1 = auto)"),
    "eval_every": (1, True, None, False, "eval_every >= 1"),
    "checkpoint_every": (-1, True, None, False, "checkpoint_every >= -1 (-1 = eval_every, 0 = none)"),
    "seed": (0, True, None, False, "seed >= 0"),
    "validation": (0.0, True, 1.0, False, "0 <= validation < 1 (0: evaluate on the test split)"),
    "inner_steps": (1, True, None, False, "inner_steps >= 1"),
    "inner_lr": (0.0, False, None, False, "inner_lr > 0"),
    "pfedme_beta": (0.0, False, None, False, "pfedme_beta > 0"),
    "perfedavg_beta": (0.0, False, None, False, "perfedavg_beta > 0"),
    "drop_prob": (0.0, True, 1.0, False, "0 <= drop_prob < 1"),
    "link_drop_prob": (0.0, True, 1.0, False, "0 <= link_drop_prob < 1"),
    "processes": (1, True, None, False, "processes >= 1"),
    "timeout_s": (0.0, False, None, False, "timeout_s > 0"),
}


def _types(annotation: str) -> tuple[type, ...]:
    if annotation.startswith("int"):
        return (int,)
    if annotation.startswith("float"):
        return (int, float)
    if annotation == "bool":
        return (bool,)
    return (dict,) if annotation.startswith("dict") else (str,)


_TYPES: dict[str, tuple[type, ...]] = {f.name: _types(str(f.type)) for f in fields(RunConfig)}
_OPTIONAL = {f.name for f in fields(RunConfig) if "None" in str(f.type)}
_KNOWN = set(_TYPES)
# Keys a saved config.yaml carries besides the config (what produced it); ignored when read back.
PROVENANCE_KEYS = ("versions",)


def _unknown_key(key: object) -> str:
    return f"unknown config key '{key}'; known keys: {', '.join(sorted(_KNOWN))}"


def _check(name: str, value: Any) -> Any:
    """``value`` for key ``name``, normalised (ints to floats where floats are meant); or ConfigError."""
    if value is None and name in _OPTIONAL:
        return None
    types = _TYPES[name]
    if float in types and isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types)
        raise ConfigError(f"config key '{name}': expected {want}, got {type(value).__name__} {value!r}")
    if float in types:
        value = float(value)  # type: ignore[arg-type]  # an int or float, checked above
        if not math.isfinite(value):
            raise ConfigError(f"config key '{name}' = {value!r} is not a finite number")
    if name == "data":
        return dict(value)
    if name == "map_init" and value == "zeros":
        raise ConfigError(
            "config key 'map_init' = zeros is rejected: zero restriction maps never learn "
            f"(paper Remark); allowed: {', '.join(_CHOICES[name])}"
        )
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ConfigError(
            f"config key '{name}': {value!r} is not allowed; allowed: {', '.join(_CHOICES[name])}"
        )
    if name == "device" and not _DEVICE.fullmatch(value):
        raise ConfigError(f"config key 'device': {value!r} is not allowed; allowed: cpu, cuda, cuda:N")
    if name in _RANGES:
        lo, lo_in, hi, hi_in, text = _RANGES[name]
        bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
            hi is not None and (value > hi if hi_in else value >= hi)
        )
        if bad:
            raise ConfigError(f"config key '{name}' = {value!r} is out of range; allowed: {text}")
    return value


def _check_together(config: RunConfig) -> None:
    """Rules that involve several keys."""
    if config.graph == "file" and not config.graph_file:
        raise ConfigError("config key 'graph_file' must name an edge-list file when graph = file")
    if config.graph_file and config.graph != "file":
        raise ConfigError(
            f"config key 'graph_file' is set but graph = {config.graph}, which ignores it; "
            "add graph=file to use the edge list"
        )
    if config.map_init in ("gaussian", "uniform", "orthogonal") and config.map_scale == 0.0:
        raise ConfigError(
            f"config key 'map_scale' = 0 gives zero maps with map_init={config.map_init}; "
            "zero restriction maps never learn (allowed: map_scale > 0)"
        )


def validate(config: RunConfig) -> RunConfig:
    """``config`` itself: a :class:`RunConfig` is validated when built (kept for callers)."""
    return config


def from_mapping(mapping: Mapping[str, Any]) -> RunConfig:
    """A validated config from a mapping of keys (a saved ``config.yaml``'s provenance is ignored)."""
    values = {k: v for k, v in mapping.items() if k not in PROVENANCE_KEYS}
    unknown = sorted(str(k) for k in set(values) - _KNOWN)
    if unknown:
        raise ConfigError(_unknown_key(unknown[0]))
    return RunConfig(**values)
