"""What to say when a run diverges: the step sizes and scales the run's algorithm actually reads
(its registry entry's step keys)."""

from __future__ import annotations

from ...config import RunConfig
from ...config.registry import algorithm_spec


def _value(v: object) -> str:
    return "auto" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def divergence_message(round_: int, config: RunConfig) -> str:
    """One line: the round, and the keys of ``config.algorithm`` to lower, with their values."""
    spec = algorithm_spec(config.algorithm)
    keys, hint = (spec.step_keys, spec.divergence_hint) if spec is not None else (("alpha",), "")
    if config.algorithm == "sheaf-fmtl" and config.eta == 0:
        keys = tuple(k for k in keys if k != "eta")
    values = ", ".join(f"{k}={_value(getattr(config, k))}" for k in keys)
    return (
        f"the loss became NaN or infinite at round {round_}; try smaller step sizes or scales "
        f"({values}){hint}"
    )
