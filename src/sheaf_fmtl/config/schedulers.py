"""The local steps' learning-rate scheduler as PyTorch defines it (config keys ``lr_scheduler``,
``lr_scheduler_args``): a ``torch.optim.lr_scheduler`` class (or ``module:Class``) stepped once per
round from ``alpha``; its arguments that depend on the run's length (:data:`LENGTH_ARGS`) default to
``rounds``, so ``lr_scheduler=CosineAnnealingLR`` alone anneals over the run. The rates of a run are
a table, one per round (:func:`lr_table`), computed once per setting: nothing to checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..component_keys import Keys, declare_keys, key
from .errors import ConfigError, shown
from .optimizers import accepted_args, load_class

#: Scheduler arguments that default to ``rounds`` (the scheduler steps once per round).
LENGTH_ARGS = ("T_max", "total_steps")
#: Schedulers that cannot be given by name and keyword arguments alone.
UNSCHEDULABLE = {
    "ReduceLROnPlateau": "it steps on a validation metric, not once per round",
    "LambdaLR": "its lr_lambda is a function",
    "MultiplicativeLR": "its lr_lambda is a function",
    "SequentialLR": "it takes other schedulers",
    "ChainedScheduler": "it takes other schedulers",
}


def scheduler_class(name: str) -> type:
    """The ``torch.optim.lr_scheduler`` class (or ``module:Class``) ``lr_scheduler`` names."""
    if name in UNSCHEDULABLE:
        raise ConfigError(
            f"config key 'lr_scheduler' = {name} is refused: {UNSCHEDULABLE[name]}; name a scheduler "
            "built from keyword arguments alone (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, ...)"
        )
    sched = torch.optim.lr_scheduler
    return load_class("lr_scheduler", name, sched, sched.LRScheduler, UNSCHEDULABLE)


def scheduler_kwargs(config: Any) -> dict[str, Any]:
    """``lr_scheduler_args``, with :data:`LENGTH_ARGS` the scheduler takes defaulting to ``rounds``."""
    accepted = accepted_args(scheduler_class(config.lr_scheduler))
    out = dict(config.lr_scheduler_args)
    for name in LENGTH_ARGS:
        if name in accepted and name not in out:
            out[name] = config.rounds
    return out


def rounds_dependent(values: Any) -> bool:
    """Whether a config (a mapping of its keys) anneals over ``rounds``: ``lr_schedule = cosine``,
    or an ``lr_scheduler`` whose length (:data:`LENGTH_ARGS`) defaults to it."""
    if values.get("lr_schedule") == "cosine":
        return True
    name, given = values.get("lr_scheduler") or "", values.get("lr_scheduler_args") or {}
    try:
        accepted = accepted_args(scheduler_class(name)) if name else frozenset()
    except ConfigError:
        return False
    return any(a in accepted and a not in given for a in LENGTH_ARGS)


_TABLES: dict[str, tuple[float, ...]] = {}


def lr_table(config: Any, rounds: int | None = None) -> tuple[float, ...]:
    """The learning rate of each round ``0 .. rounds - 1`` under ``lr_scheduler`` (one scheduler
    step per round, from ``alpha``), cached per setting."""
    n = config.rounds if rounds is None else rounds
    key = repr((config.lr_scheduler, sorted(scheduler_kwargs(config).items()), config.alpha, n))
    if key not in _TABLES:
        p = torch.zeros(1)
        opt = torch.optim.SGD([p], lr=config.alpha)
        try:
            sched = scheduler_class(config.lr_scheduler)(opt, **scheduler_kwargs(config))
            lrs = [float(opt.param_groups[0]["lr"])]
            for _ in range(n - 1):
                opt.step()  # (no gradient: nothing moves; the scheduler sees the order it expects)
                sched.step()
                lrs.append(float(opt.param_groups[0]["lr"]))
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise ConfigError(
                f"config key 'lr_scheduler' = {config.lr_scheduler} cannot be built with lr_scheduler_args "
                f"{shown(dict(config.lr_scheduler_args))}: {' '.join(str(e).split())}; give its arguments "
                "as lr_scheduler_args.NAME=VALUE"
            ) from None
        _TABLES[key] = tuple(lrs)
    return _TABLES[key]


def check(config: Any) -> None:
    """Refuse (ConfigError, one line) a scheduler the local steps cannot run, or its keys alone."""
    if config.lr_scheduler_args and not config.lr_scheduler:
        raise ConfigError("config key 'lr_scheduler_args' is set but lr_scheduler is empty; name a scheduler")
    if config.lr_scheduler and config.lr_schedule != "constant":
        raise ConfigError(
            f"config keys 'lr_scheduler' = {config.lr_scheduler} and 'lr_schedule' = {config.lr_schedule} "
            "are both set; keep one of them"
        )
    if config.lr_scheduler:
        lr_table(config, rounds=2)


@declare_keys("lr schedule")
@dataclass(frozen=True)
class ScheduleKeys(Keys):
    """The learning-rate schedules' own keys (``lr_schedule``, ``lr_scheduler`` pick one)."""

    lr_step_every: int = key(100, "`lr_schedule=step`: rounds between two decays.", rule="lr_step_every >= 1")
    lr_step_gamma: float = key(
        0.1,
        "`lr_schedule=step`: factor of each decay.",
        rule="0 < lr_step_gamma <= 1",
    )
    lr_scheduler_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Keyword arguments of `lr_scheduler`, `lr_scheduler_args.KEY=VALUE` (e.g. `gamma=0.5`)."
        },
    )
