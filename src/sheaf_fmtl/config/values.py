"""The values each config key allows: choices (fixed, or a registry's entries read when a value is
checked), numeric ranges, the device's pattern; :mod:`.schema` checks each key against them and the
configuration reference prints them (:mod:`.reference`)."""

from __future__ import annotations

import re
from typing import Any

from ..component_keys import owner_of
from ..compression import COMPRESSOR_NAMES
from ..data.base import PARTITIONS
from ..sheaf.graph import GRAPH_KINDS
from ..sheaf.graph_keys import GraphKeys as _declares_graph_keys  # noqa: F401 - declared as imported
from ..sheaf.links import BUDGETED
from . import registry

#: The values of config key ``placement`` (clients over processes; formerly ``partition``).
PLACEMENTS = ("contiguous", "community")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_CHOICES: dict[str, tuple[str, ...]] = {
    "graph": GRAPH_KINDS,
    "init": ("common", "per-client"),
    "edge_weights": ("auto", "relatedness", "graph"),
    "graph_schedule": ("fixed", "random-peers", "exponential", *BUDGETED),
    "placement": PLACEMENTS,
    "partition": PARTITIONS,
    "topology": ("none", "conventional-fmtl", "personalised-fl", "hybrid-fl"),
    "metric_goal": ("auto", "max", "min"),
    "lr_schedule": ("constant", "cosine", "step"),
    "compressor": COMPRESSOR_NAMES,
    "transport": ("gloo", "tls"),
}
# key -> (lower, lower inclusive, upper, upper inclusive, text)
_RANGES: dict[str, tuple[float | None, bool, float | None, bool, str]] = {
    "clients": (2, True, None, False, "clients >= 2"),
    "rounds": (1, True, None, False, "rounds >= 1"),
    "batch_size": (0, True, None, False, "batch_size >= 0 (0 = full batch)"),
    "local_steps": (1, True, None, False, "local_steps >= 1"),
    "local_epochs": (0, True, None, False, "local_epochs >= 0 (0 = local_steps steps per round)"),
    "lam": (0.0, True, None, False, "lam >= 0"),
    "alpha": (0.0, False, None, False, "alpha > 0"),
    "coupling_step": (0.0, False, None, False, "coupling_step > 0 (null: measured from the local work)"),
    "eta": (0.0, True, None, False, "eta >= 0"),
    "gamma": (0.0, False, 1.0, True, "0 < gamma <= 1"),
    "l2": (0.0, True, None, False, "l2 >= 0"),
    "eval_every": (1, True, None, False, "eval_every >= 1"),
    "checkpoint_every": (-1, True, None, False, "checkpoint_every >= -1 (-1 = eval_every, 0 = none)"),
    "seed": (0, True, None, False, "seed >= 0"),
    "validation": (0.0, True, 1.0, False, "0 <= validation < 1 (0: evaluate on the test split)"),
    "drop_prob": (0.0, True, 1.0, False, "0 <= drop_prob < 1"),
    "link_drop_prob": (0.0, True, 1.0, False, "0 <= link_drop_prob < 1"),
    "clients_per_round": (1, True, None, False, "clients_per_round >= 1 (null: every client)"),
    "processes": (1, True, None, False, "processes >= 1"),
    "timeout_s": (0.0, False, None, False, "timeout_s > 0"),
    "weight_decay": (0.0, True, None, False, "weight_decay >= 0"),
    "grad_clip": (0.0, True, None, False, "grad_clip >= 0 (0: no clipping)"),
}


#: Keys whose choices are the registries' entries (:mod:`.registry`), read when a value is checked.
_REGISTERED = {"algorithm": registry.algorithm_names, "maps": registry.map_mode_names}


def choices(name: str) -> tuple[str, ...] | None:
    """The values key ``name`` allows, or ``None`` when it is not a choice (a component's key:
    as its declaration says)."""
    if name in _REGISTERED:
        return _REGISTERED[name]()
    meta = _declared_meta(name)
    if meta is not None:
        found = meta.get("choices")
        return None if found is None else tuple(found)
    return _CHOICES.get(name)


def range_of(name: str) -> tuple[float | None, bool, float | None, bool, str] | None:
    """The range of numeric key ``name`` (lower, inclusive, upper, inclusive, in words), or
    ``None`` (a component's key: as its declaration says)."""
    meta = _declared_meta(name)
    if meta is None:
        return _RANGES.get(name)
    bounds = meta.get("range")
    if bounds is None:
        return None
    lo, lo_in, hi, hi_in, text = bounds
    return lo, lo_in, hi, hi_in, text


def _declared_meta(name: str) -> dict[str, Any] | None:
    """The metadata of a component's key ``name`` (``None``: a common key)."""
    cls = owner_of(name)
    if cls is None:
        return None
    return dict(cls.__dataclass_fields__[name].metadata)


#: The largest first round ``join_round`` takes (first rounds are held as int64).
MAX_JOIN_ROUND = 2**63 - 1


def join_round_values(spec: str) -> tuple[int, int] | list[int] | None:
    """``join_round`` read: ``None`` (empty: every client from the start), ``(K, R)`` for
    ``late:K@R``, or one first round per client (comma-separated, maybe in brackets). ValueError
    when it is none of these, or a number is not a whole number from 0 to :data:`MAX_JOIN_ROUND`."""
    spec = spec.strip()
    if not spec:
        return None
    if spec.startswith("late:"):
        k, at, r = spec[5:].partition("@")
        if not at:
            raise ValueError(spec)
        count, first = _join_number(k), _join_number(r)
        return count, first
    return [_join_number(v) for v in spec.strip("[]").split(",")]


def _join_number(text: str) -> int:
    """A whole number from 0 to :data:`MAX_JOIN_ROUND` (ValueError otherwise, also for a huge one)."""
    value = int(text)  # (ValueError: not a whole number, or more digits than int() reads)
    if not 0 <= value <= MAX_JOIN_ROUND:
        raise ValueError(text)
    return value
