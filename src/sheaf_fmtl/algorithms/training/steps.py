"""Local SGD steps on stacked thetas, and the one-model check of the baselines.

Every gradient goes through :meth:`Context.stochastic_gradients` (fresh mini-batches, batch losses
recorded); the helpers here only shape it for one-cohort stacks and repeated steps.

The baselines compare clients' models coordinate by coordinate, so every client must have the same
model (the federation has one cohort); Sheaf-FMTL and local training have no such restriction.
"""

from __future__ import annotations

import numpy as np
import torch

from ..protocol.algorithm import Context, State


def require_single_cohort(ctx: Context, name: str) -> None:
    """Raise unless all clients share one architecture (one ``[N, d]`` stack in client order)."""
    fed = ctx.fed
    if len(fed.cohorts) != 1 or len(set(fed.node_dims().tolist())) != 1:  # also clients held elsewhere
        dims = sorted(set(fed.node_dims().tolist()) | {c.dim for c in fed.cohorts})
        fix = "or a dataset where all clients share the input shape (e.g. synthetic)"
        if ctx.config.dataset == "synthetic-clusters":  # its clients see different features
            fix = "or add data.homogeneous=true (the same clients and labels, every feature seen by all)"
        raise ValueError(
            f"algorithm {name!r} needs every client to have the same model, but this federation has "
            f"{len(fed.cohorts)} model groups (parameter counts {dims}); use sheaf-fmtl or local for "
            f"heterogeneous models, {fix}"
        )
    held = fed.position[fed.cohort_of >= 0]
    if not np.array_equal(held, np.arange(len(held))):  # pragma: no cover - by construction
        raise ValueError("single-cohort federation must stack clients in client order")


def gradient(ctx: Context, theta: torch.Tensor, state: State) -> torch.Tensor:
    """Fresh mini-batch gradient ``[N, d]`` of a one-cohort stack; records the batch losses."""
    grads, state.batch_loss = ctx.stochastic_gradients([theta])
    return grads[0]


def sgd_step(thetas: list[torch.Tensor], grads: list[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    """``theta <- theta - alpha g`` per cohort stack (one new ``[C, d]`` each, no temporary)."""
    return [torch.add(t, g, alpha=-alpha) for t, g in zip(thetas, grads, strict=True)]


def coupled_step(
    thetas: list[torch.Tensor],
    grads: list[torch.Tensor] | None,
    pull: list[torch.Tensor],
    alpha: float,
    lam: float,
    step: float | list[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """The coupling step of Sheaf-FMTL's map modes per cohort stack (paper eq. (18) ``thetaupdate``):
    ``theta <- theta - alpha (g + lam c)``, or without gradients (after the local epochs)
    ``theta <- theta - s lam c`` with the coupling's own step ``s`` (a number, or per cohort ``[C, 1]``;
    :mod:`.coupling_step`; ``None``: ``alpha``); ``c``: the coupling term ``pull``."""
    if grads is None:  # one new [C, d] a cohort (``torch.add`` / ``addcmul``), no temporaries
        s = alpha if step is None else step
        if isinstance(s, float):
            return [torch.add(t, c, alpha=-(s * lam)) for t, c in zip(thetas, pull, strict=True)]
        return [torch.addcmul(t, r, c, value=-lam) for t, r, c in zip(thetas, s, pull, strict=True)]
    return [
        torch.add(g, c, alpha=lam).mul_(-alpha).add_(t) for t, g, c in zip(thetas, grads, pull, strict=True)
    ]


def sgd_steps(ctx: Context, state: State, theta: torch.Tensor, steps: int, alpha: float) -> torch.Tensor:
    """``steps`` plain local SGD steps ``theta <- theta - alpha g(theta)`` of a one-cohort stack from
    fresh mini-batches."""
    for _ in range(steps):
        theta = torch.add(theta, gradient(ctx, theta, state), alpha=-alpha)
    return theta
