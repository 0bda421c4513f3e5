"""Grid syntax of ``sheaf-fmtl sweep --grid KEY=VALUES``: ``a:b:logN`` (``N`` log-spaced values
from ``a`` to ``b``), ``a:b:linN`` (``N`` evenly spaced) or a comma list; the grid's points and
the config of one point."""

from __future__ import annotations

import difflib
import itertools
import math
import re
from typing import Any

import numpy as np

from ..config import ConfigError, RunConfig, from_mapping, parse_yaml
from ..config.schema import dict_keys, key_fields

RANGE = re.compile(r"^(?P<a>[^:]+):(?P<b>[^:]+):(?P<kind>log|lin)(?P<n>[-+]?\d+)$")


def _int_keys() -> set[str]:
    return {name for name, f in key_fields().items() if str(f.type).startswith("int")}


#: The most values one key may take, and the most cells a grid may have (each cell is a whole run).
MAX_VALUES = 1000
MAX_CELLS = 10000


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_values(spec: str) -> list[Any]:
    """``a:b:logN`` / ``a:b:linN`` / a comma list -> the values (numbers rounded to 6 digits)."""
    m = RANGE.match(spec.strip())
    if m:
        a, b, n = _number(m["a"], spec), _number(m["b"], spec), int(m["n"])
        if n < 1:
            raise ConfigError(f"grid {_short(spec)!r}: {m['kind']}{n} asks for {n} values; needs at least 1")
        if n > MAX_VALUES:
            raise ConfigError(f"grid {_short(spec)!r} asks for {n} values; at most {MAX_VALUES} per key")
        if m["kind"] == "log":
            if a <= 0 or b <= 0:
                raise ConfigError(f"grid {_short(spec)!r}: log spacing needs a > 0 and b > 0")
            raw = np.geomspace(a, b, n)
        else:
            raw = np.linspace(a, b, n)
        return [float(f"{v:.6g}") for v in raw]
    items = [s.strip() for s in spec.split(",")]
    if len(items) > MAX_VALUES:
        raise ConfigError(f"grid {_short(spec)!r} lists {len(items)} values; at most {MAX_VALUES} per key")
    if not all(items):
        raise ConfigError(f"grid {_short(spec)!r}: empty value (use a:b:logN, a:b:linN or a comma list)")
    return [_scalar(s) for s in items]


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"grid {_short(spec)!r}: {_short(text)!r} is not a number") from None


def _scalar(text: str) -> Any:
    value = parse_yaml(text, f"grid value {_short(text)!r}")  # (010 and 1:30 refused, as in a config)
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["lam=1e-5:10:log7", "alpha=0.01,0.05"]`` -> ``{key: values}`` in the given order."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, spec = item.partition("=")
        key = key.strip()
        if not sep or not key or not spec.strip():
            raise ConfigError(f"--grid {_short(item)!r} must look like KEY=VALUES (e.g. lam=1e-5:10:log7)")
        top, dot, sub = key.partition(".")
        if top not in key_fields() or (dot and (top not in dict_keys() or not sub)):
            close = difflib.get_close_matches(
                top.lower().replace("-", "_"), sorted(key_fields()), n=2, cutoff=0.6
            )
            hint = (
                f"; did you mean {' or '.join(f'--grid {k}={_short(spec)}' for k in close)}?" if close else ""
            )
            raise ConfigError(f"--grid {_short(item)!r}: unknown config key '{_short(key)}'{hint}")
        if key == "validation":
            raise ConfigError("--grid validation: the split is set with --validation, not swept")
        if key in grid:
            raise ConfigError(f"--grid {key} given twice")
        grid[key] = parse_values(spec)
    if not grid:
        raise ConfigError("sweep needs at least one --grid KEY=VALUES")
    cells = math.prod(len(v) for v in grid.values())
    if cells > MAX_CELLS:
        sizes = " x ".join(str(len(v)) for v in grid.values())
        raise ConfigError(
            f"--grid has {sizes} = {cells} cells; at most {MAX_CELLS} (each cell is a whole run)"
        )
    return grid


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, the last key varying fastest."""
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def apply_point(base: RunConfig, point: dict[str, Any], **extra: Any) -> RunConfig:
    """``base`` with the grid point's values (``data.KEY`` into ``data``, likewise the other mappings,
    e.g. ``optimizer_args.KEY``; integral floats of integer keys as ints) and ``extra`` keys; validated."""
    mapping = base.to_dict()
    for key, value in {**point, **extra}.items():
        top, dot, sub = key.partition(".")
        if dot and top in dict_keys():
            mapping[top] = {**mapping[top], sub: value}
        else:
            integral = isinstance(value, float) and value.is_integer()
            mapping[key] = int(value) if key in _int_keys() and integral else value
    return from_mapping(mapping)


def cell_name(point: dict[str, Any]) -> str:
    return re.sub(r"[^A-Za-z0-9._=,+-]", "-", ",".join(f"{k}={v}" for k, v in point.items()))
