"""The values each config key allows: choices (fixed, or a registry's entries read when a value is
checked), numeric ranges, the device's pattern; :mod:`.schema` checks each key against them and the
configuration reference prints them (:mod:`.reference`)."""

from __future__ import annotations

import re

from ..compression import COMPRESSOR_NAMES
from ..data.base import CLASS_ASSIGNMENTS, PARTITIONS
from ..sheaf.graph import GRAPH_KINDS
from ..sheaf.links import BUDGETED
from ..sheaf.maps import MAP_DTYPES, MAP_INITS
from ..sheaf.selection import MAP_KINDS
from . import registry

#: The values of config key ``placement`` (clients over processes; formerly ``partition``).
PLACEMENTS = ("contiguous", "community")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_CHOICES: dict[str, tuple[str, ...]] = {
    "graph": GRAPH_KINDS,
    "map_init": MAP_INITS,
    "map_kind": MAP_KINDS,
    "map_dtype": tuple(MAP_DTYPES),
    "message_mode": ("compact", "literal"),
    "dpsgd_order": ("lian", "atc"),
    "init": ("common", "per-client"),
    "edge_weights": ("auto", "relatedness", "graph"),
    "map_draw": ("host", "device"),
    "graph_schedule": ("fixed", "random-peers", "exponential", *BUDGETED),
    "peers_from": ("graph", "all"),
    "placement": PLACEMENTS,
    "partition": PARTITIONS,
    "class_assignment": CLASS_ASSIGNMENTS,
    "topology": ("none", "conventional-fmtl", "personalised-fl", "hybrid-fl"),
    "metric_goal": ("auto", "max", "min"),
    "lr_schedule": ("constant", "cosine", "step"),
    "wandb_mode": ("offline", "online", "disabled"),
    "compressor": COMPRESSOR_NAMES,
    "transport": ("gloo", "tls"),
}
# key -> (lower, lower inclusive, upper, upper inclusive, text)
_RANGES: dict[str, tuple[float | None, bool, float | None, bool, str]] = {
    "clients": (2, True, None, False, "clients >= 2"),
    "graph_p": (0.0, False, 1.0, True, "0 < graph_p <= 1"),
    "graph_degree": (0.0, False, None, False, "graph_degree > 0"),
    "graph_k": (2, True, None, False, "graph_k >= 2"),
    "graph_m": (1, True, None, False, "graph_m >= 1"),
    "rounds": (1, True, None, False, "rounds >= 1"),
    "batch_size": (0, True, None, False, "batch_size >= 0 (0 = full batch)"),
    "local_steps": (1, True, None, False, "local_steps >= 1"),
    "local_epochs": (0, True, None, False, "local_epochs >= 0 (0 = local_steps steps per round)"),
    "lam": (0.0, True, None, False, "lam >= 0"),
    "alpha": (0.0, False, None, False, "alpha > 0"),
    "coupling_step": (0.0, False, None, False, "coupling_step > 0 (null: measured from the local work)"),
    "eta": (0.0, True, None, False, "eta >= 0"),
    "gamma": (0.0, False, 1.0, True, "0 < gamma <= 1"),
    "distill": (0.0, True, None, False, "distill >= 0"),
    "proxy_gamma": (0.0, False, 1.0, True, "0 < proxy_gamma <= 1"),
    "probe_size": (1, True, None, False, "probe_size >= 1"),
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
    "pfedgraph_alpha": (0.0, False, None, False, "pfedgraph_alpha > 0"),
    "dpfl_budget": (1, True, None, False, "dpfl_budget >= 1"),
    "dpfl_period": (1, True, None, False, "dpfl_period >= 1"),
    "dpfl_holdout": (0.0, False, 1.0, False, "0 < dpfl_holdout < 1"),
    "finetune_epochs": (1, True, None, False, "finetune_epochs >= 1"),
    "personal_layers": (1, True, None, False, "personal_layers >= 1"),
    "drop_prob": (0.0, True, 1.0, False, "0 <= drop_prob < 1"),
    "link_drop_prob": (0.0, True, 1.0, False, "0 <= link_drop_prob < 1"),
    "processes": (1, True, None, False, "processes >= 1"),
    "peers": (1, True, None, False, "peers >= 1"),
    "link_budget": (0.0, False, 1.0, True, "0 < link_budget <= 1 (null: one matching a round)"),
    "partition_alpha": (0.0, False, None, False, "partition_alpha > 0"),
    "classes_per_client": (1, True, None, False, "classes_per_client >= 1"),
    "timeout_s": (0.0, False, None, False, "timeout_s > 0"),
    "silo": (0, True, None, False, "silo >= 0 (null: every silo on this machine)"),
    "momentum": (0.0, True, 1.0, False, "0 <= momentum < 1"),
    "adam_beta1": (0.0, True, 1.0, False, "0 <= adam_beta1 < 1"),
    "adam_beta2": (0.0, True, 1.0, False, "0 <= adam_beta2 < 1"),
    "adam_eps": (0.0, False, None, False, "adam_eps > 0"),
    "weight_decay": (0.0, True, None, False, "weight_decay >= 0"),
    "grad_clip": (0.0, True, None, False, "grad_clip >= 0 (0: no clipping)"),
    "lr_step_every": (1, True, None, False, "lr_step_every >= 1"),
    "lr_step_gamma": (0.0, False, 1.0, True, "0 < lr_step_gamma <= 1"),
    "early_stop_patience": (0, True, None, False, "early_stop_patience >= 0 (0: never)"),
    "early_stop_min_delta": (0.0, True, None, False, "early_stop_min_delta >= 0"),
    "compression": (0.0, False, 1.0, True, "0 < compression <= 1"),
    "quantization_bits": (2, True, 16, True, "2 <= quantization_bits <= 16"),
    "rank": (1, True, None, False, "rank >= 1"),
    "consensus_step": (0.0, False, None, False, "consensus_step > 0"),
}


#: Keys whose choices are the registries' entries (:mod:`.registry`), read when a value is checked.
_REGISTERED = {"algorithm": registry.algorithm_names, "maps": registry.map_mode_names}


def choices(name: str) -> tuple[str, ...] | None:
    """The values key ``name`` allows, or ``None`` when it is not a choice."""
    if name in _REGISTERED:
        return _REGISTERED[name]()
    return _CHOICES.get(name)


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
