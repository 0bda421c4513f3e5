"""The optimizer and learning-rate schedule of the local steps (config keys ``optimizer``,
``lr_schedule``): plain SGD (the paper's), SGD with momentum, or Adam, each as ``torch.optim``
defines it, run on every client at once over the stacked thetas.

The state is per client, stacked like the models: per cohort a ``[C, d]`` buffer (momentum, or
Adam's first moment), Adam's second moment ``[C, d]`` and its step count ``[C]``; it lives in the
algorithm's state (``opt_m``, ``opt_v``, ``opt_t``, ``opt_calls``), so checkpoints carry it and a
resumed run continues it exactly. A client that takes no step (no batch left in a local epoch)
keeps its model and its optimizer state, as ``torch.optim`` would with no ``step()`` call.

The learning rate of round ``r = 0, 1, ...`` (counted by the local steps taken,
``opt_calls // local steps per round``) is ``alpha`` (``constant``), ``alpha * lr_step_gamma **
(r // lr_step_every)`` (``step``) or ``alpha * (1 + cos(pi r / rounds)) / 2`` (``cosine``). With
``sgd`` and ``constant`` (the defaults) :func:`local_step` is :func:`.steps.sgd_step` itself: the
same numbers as before these keys existed. Which algorithms take another optimizer or schedule is
checked with the config (:mod:`sheaf_fmtl.config.rules`).
"""

from __future__ import annotations

import math

import torch

from ..config import RunConfig
from ..federation import Batch
from .base import Context, State
from .steps import gradient, sgd_step, sgd_steps


def plain(config: RunConfig) -> bool:
    """Whether the local steps are the paper's: plain SGD at the constant step size ``alpha``."""
    return config.optimizer == "sgd" and config.lr_schedule == "constant"


def learning_rate(config: RunConfig, round_index: int) -> float:
    """The step size of round ``round_index`` (0-based) under ``lr_schedule``."""
    if config.lr_schedule == "step":
        return config.alpha * config.lr_step_gamma ** (round_index // config.lr_step_every)
    if config.lr_schedule == "cosine":
        return (
            config.alpha * 0.5 * (1.0 + math.cos(math.pi * min(round_index, config.rounds) / config.rounds))
        )
    return config.alpha


def local_step(
    ctx: Context, state: State, thetas: list[torch.Tensor], grads: list[torch.Tensor], alpha: float
) -> list[torch.Tensor]:
    """One local step of every cohort stack from the gradients ``grads``: ``theta <- theta - alpha g``
    (:func:`.steps.sgd_step`) by default, else the configured optimizer and schedule."""
    config = ctx.config
    if plain(config):
        return sgd_step(thetas, grads, alpha)
    if not state.opt_t:  # the first step: zero buffers, no steps taken
        state.opt_t = [t.new_zeros(len(t)) for t in thetas]
        state.opt_m = [torch.zeros_like(t) for t in thetas] if config.optimizer != "sgd" else []
        state.opt_v = [torch.zeros_like(t) for t in thetas] if config.optimizer == "adam" else []
    lr = learning_rate(config, state.opt_calls // max(1, ctx.local_steps()))
    state.opt_calls += 1
    none: list[torch.Tensor | None] = [None] * len(thetas)
    batches = ctx.last_batches if len(ctx.last_batches) == len(thetas) else [True] * len(thetas)
    stepped = [_stepped(t, b) for t, b in zip(thetas, batches, strict=True)]
    out, ms, vs, ts = [], [], [], []
    for theta, g, m, v, t, active in zip(
        thetas, grads, state.opt_m or none, state.opt_v or none, state.opt_t, stepped, strict=True
    ):
        theta_new, m_new, v_new, t_new = _update(config, lr, theta, g, m, v, t)
        if active is not None:  # clients without a batch keep everything
            keep = active.view(-1, *[1] * (theta.dim() - 1))
            theta_new, t_new = torch.where(keep, theta_new, theta), torch.where(active, t_new, t)
            m_new = None if m_new is None or m is None else torch.where(keep, m_new, m)
            v_new = None if v_new is None or v is None else torch.where(keep, v_new, v)
        out.append(theta_new)
        ms.append(m_new)
        vs.append(v_new)
        ts.append(t_new)
    # new tensors, never written in place: a client that sits the round out is put back (faults)
    state.opt_m = [m for m in ms if m is not None]
    state.opt_v = [v for v in vs if v is not None]
    state.opt_t = ts
    return out


def _stepped(theta: torch.Tensor, batch: Batch | bool | None) -> torch.Tensor | None:
    """Which rows of ``theta`` a gradient step on ``batch`` moves (``None``: all of them; a
    gradient not drawn from batches, ``True``: all of them too)."""
    if batch is None:
        return torch.zeros(len(theta), dtype=torch.bool, device=theta.device)
    if isinstance(batch, bool) or batch.active is None:
        return None
    return torch.zeros(len(theta), dtype=torch.bool, device=theta.device).index_fill_(0, batch.active, True)


def _update(
    config: RunConfig,
    lr: float,
    theta: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor | None,
    v: torch.Tensor | None,
    t: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """``torch.optim.SGD`` (with ``momentum``) or ``torch.optim.Adam`` (no weight decay: ``l2`` is
    in the loss), row by row of the stack; returns the new theta, buffers and step counts."""
    t = t + 1
    if config.optimizer == "sgd":
        return theta - lr * g, m, v, t
    assert m is not None
    if config.optimizer == "momentum":
        m = config.momentum * m + g
        return theta - lr * m, m, v, t
    assert v is not None
    b1, b2 = config.adam_beta1, config.adam_beta2
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    shape = (-1, *[1] * (theta.dim() - 1))
    correction1 = (1.0 - torch.pow(b1, t)).view(shape)
    correction2 = (1.0 - torch.pow(b2, t)).view(shape)
    denom = v.sqrt() / correction2.sqrt() + config.adam_eps
    return theta - (lr / correction1) * (m / denom), m, v, t


def local_steps(ctx: Context, state: State, theta: torch.Tensor, steps: int, alpha: float) -> torch.Tensor:
    """``steps`` local steps of a one-cohort stack from fresh mini-batches (:func:`.steps.sgd_steps`
    with the configured optimizer)."""
    if plain(ctx.config):
        return sgd_steps(ctx, state, theta, steps, alpha)
    for _ in range(steps):
        theta = local_step(ctx, state, [theta], [gradient(ctx, theta, state)], alpha)[0]
    return theta
