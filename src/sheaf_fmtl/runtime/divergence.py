"""What to say when a run diverges: the step sizes and scales the run's algorithm actually reads."""

from __future__ import annotations

from ..config import RunConfig

#: Per algorithm, the keys whose size makes its iterates blow up (in the order to try them).
STEP_KEYS: dict[str, tuple[str, ...]] = {
    "sheaf-fmtl": ("alpha", "eta", "lam", "map_scale"),
    "dfedu": ("alpha", "lam"),
    "dpsgd": ("alpha",),
    "local": ("alpha",),
    "fedavg": ("alpha",),
    "ditto": ("alpha", "lam"),
    "pfedme": ("inner_lr", "alpha", "lam", "pfedme_beta"),
    "perfedavg": ("alpha", "perfedavg_beta"),
}
BOUNDS = {"sheaf-fmtl": ": Theorem 1 asks alpha < 2/(N L) and eta < 2/(lambda D^2)"}


def _value(v: object) -> str:
    return "auto" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def divergence_message(round_: int, config: RunConfig) -> str:
    """One line: the round, and the keys of ``config.algorithm`` to lower, with their values."""
    keys = STEP_KEYS.get(config.algorithm, ("alpha",))
    if config.algorithm == "sheaf-fmtl" and config.eta == 0:
        keys = tuple(k for k in keys if k != "eta")
    values = ", ".join(f"{k}={_value(getattr(config, k))}" for k in keys)
    return (
        f"the loss became NaN or infinite at round {round_}; try smaller step sizes or scales "
        f"({values}){BOUNDS.get(config.algorithm, '')}"
    )
