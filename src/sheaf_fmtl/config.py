"""Typed run configuration: YAML file + ``KEY=VALUE`` overrides (dotted keys into ``data``),
validated before any work, saved resolved with every run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .sheaf.graph import GRAPH_KINDS
from .sheaf.maps import MAP_DTYPES, MAP_INITS


class ConfigError(ValueError):
    """One line naming the key and the allowed values."""


@dataclass(frozen=True)
class RunConfig:
    algorithm: str = "sheaf-fmtl"
    dataset: str = "synthetic-hetero"
    model: str = "auto"
    clients: int | None = None  # None: the dataset's own number of clients
    graph: str = "erdos-renyi"
    graph_p: float = 0.2
    graph_k: int = 4
    graph_m: int = 2
    graph_file: str = ""
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
    seed: int = 0
    eval_every: int = 10
    save_maps: bool = True  # write the final restriction maps into checkpoint.pt (GBs at paper scale)
    stability_check: bool = True  # refuse alpha*lam*lambda_max(L) >= 2 at start-up (power iteration)
    data_dir: str = ""
    device: str = "cpu"
    data: dict[str, Any] = field(default_factory=dict)  # dataset-specific options
    # Baselines (algorithms/*.py); see each algorithm's docstring.
    dpsgd_order: str = "lian"  # lian: x <- W x - alpha g(x); atc: x <- W (x - alpha g(x))
    inner_steps: int = 5  # pFedMe: gradient steps of the inner (Moreau envelope) solve
    inner_lr: float = 0.05  # pFedMe: step size of the inner solve
    pfedme_beta: float = 1.0  # pFedMe: server mixing w <- (1 - beta) w + beta mean_i w_i
    perfedavg_beta: float = 0.01  # Per-FedAvg: meta (outer) step size; alpha is the adaptation step

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> RunConfig:
        return validate(dataclasses.replace(self, **changes))


_CHOICES: dict[str, tuple[str, ...]] = {
    "graph": GRAPH_KINDS,
    "map_init": MAP_INITS,
    "map_dtype": tuple(MAP_DTYPES),
    "message_mode": ("compact", "literal"),
    "device": ("cpu", "cuda"),
    "dpsgd_order": ("lian", "atc"),
    "init": ("common", "per-client"),
    "map_draw": ("host", "device"),
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
    "seed": (0, True, None, False, "seed >= 0"),
    "inner_steps": (1, True, None, False, "inner_steps >= 1"),
    "inner_lr": (0.0, False, None, False, "inner_lr > 0"),
    "pfedme_beta": (0.0, False, None, False, "pfedme_beta > 0"),
    "perfedavg_beta": (0.0, False, None, False, "perfedavg_beta > 0"),
}
_TYPES: dict[str, tuple[type, ...]] = {}
for _f in fields(RunConfig):
    t = str(_f.type)
    _TYPES[_f.name] = (
        (int,)
        if t.startswith("int")
        else (int, float)
        if t.startswith("float")
        else (bool,)
        if t == "bool"
        else (dict,)
        if t.startswith("dict")
        else (str,)
    )
_OPTIONAL = {"clients", "map_scale"}


def _check(name: str, value: Any) -> Any:
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
    if float in types and isinstance(value, int | float):
        value = float(value)
    if name == "map_init" and value == "zeros":
        raise ConfigError(
            "config key 'map_init' = zeros is rejected: zero restriction maps never learn "
            f"(paper Remark); allowed: {', '.join(_CHOICES[name])}"
        )
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ConfigError(
            f"config key '{name}': {value!r} is not allowed; allowed: {', '.join(_CHOICES[name])}"
        )
    if name in _RANGES:
        lo, lo_in, hi, hi_in, text = _RANGES[name]
        bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
            hi is not None and (value > hi if hi_in else value >= hi)
        )
        if bad:
            raise ConfigError(f"config key '{name}' = {value!r} is out of range; allowed: {text}")
    return value


def validate(config: RunConfig) -> RunConfig:
    values = {f.name: _check(f.name, getattr(config, f.name)) for f in fields(RunConfig)}
    out = RunConfig(**values)
    if out.graph == "file" and not out.graph_file:
        raise ConfigError("config key 'graph_file' must name an edge-list file when graph = file")
    if out.map_init in ("gaussian", "uniform", "orthogonal") and out.map_scale == 0.0:
        raise ConfigError(
            f"config key 'map_scale' = 0 gives zero maps with map_init={out.map_init}; "
            "zero restriction maps never learn (allowed: map_scale > 0)"
        )
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["lam=0.1", "data.relatedness=0.5"]`` -> nested mapping; values parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like KEY=VALUE")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def from_mapping(mapping: dict[str, Any]) -> RunConfig:
    known = {f.name for f in fields(RunConfig)}
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ConfigError(f"unknown config key '{unknown[0]}'; known keys: {', '.join(sorted(known))}")
    return validate(RunConfig(**mapping))


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Defaults, then the YAML file, then ``KEY=VALUE`` overrides; validated."""
    mapping: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping of keys to values")
        mapping.update(loaded)
    for key, value in parse_overrides(overrides or []).items():
        if key == "data" and isinstance(value, dict):
            mapping["data"] = {**mapping.get("data", {}), **value}
        elif isinstance(value, dict):
            raise ConfigError(f"config key '{key}' has no sub-keys (only 'data.*' does)")
        else:
            mapping[key] = value
    return from_mapping(mapping)


def save_config(config: RunConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
