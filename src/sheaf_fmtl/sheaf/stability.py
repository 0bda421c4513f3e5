"""Largest eigenvalue of the sheaf Laplacian by power iteration on the stacked maps.

The coupling part of the theta step (eq. (18) ``thetaupdate``), ``theta <- theta - alpha lam L_F theta``,
is stable only when ``alpha lam lambda_max(L_F) < 2``. With ``N(0, 1)`` maps (the paper's choice),
``P_ij^T P_ij`` alone has eigenvalues up to about ``(sqrt(d_i) + sqrt(d_ij))^2``, so a step size that
suits the local losses can make the coupling diverge; a few products with ``L_F`` (never formed)
estimate ``lambda_max`` from below.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..messages import Comm, EdgeTensor, LocalComm
from ..streams import STABILITY, stream
from . import ops
from .layout import SheafLayout


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], comm: Comm) -> float:
    local = sum((x.double() * y.double()).sum() for x, y in zip(a, b, strict=True))
    return float(comm.all_sum(torch.as_tensor(local, dtype=torch.float64)))


def laplacian_lambda_max(
    layout: SheafLayout,
    like: Sequence[torch.Tensor],
    maps: ops.Maps,
    iters: int = 30,
    seed: int = 0,
    comm: Comm | None = None,
    *,
    weights: torch.Tensor | None = None,
) -> float:
    """Rayleigh quotient of ``L_F`` after ``iters`` power iterations from a seeded random start,
    a lower bound of ``lambda_max(L_F)`` that approaches it as ``iters`` grows. ``like``: per-cohort
    tensors ``[C, d]`` giving the shapes, dtype and device of the thetas. Each client's start row is
    drawn from its own stream; ``comm`` (a shard of the clients): the exchanges and dot products
    span every process (default: one process holds every client).

    Args:
        layout: the sheaf layout (a shard's, with ``comm``).
        like: per cohort ``[C, d]``, for shapes, dtype and device.
        maps: stacked maps per bucket, or a ``DeferredMaps``.
        iters: power iterations.
        seed: seeds each client's start row (stream ``STABILITY``).
        comm: the exchange across processes.
        weights: ``[sum d_ij]`` edge weight ``a_ij`` per message element (weighted ``L_F``:
            ``(L theta)_i = sum_j a_ij P_ij^T r_ij``), or ``None``.
    Returns:
        The estimate of ``lambda_max(L_F)`` (0 when ``L_F v = 0``).
    References:
        The coupling part of eq. (18) ``thetaupdate`` is stable when ``alpha lam lambda_max(L_F) < 2``.
    """
    comm = LocalComm() if comm is None else comm
    v = [
        torch.stack(
            [
                torch.randn(t.shape[1], generator=stream(seed, STABILITY, int(c)), dtype=torch.float64)
                for c in members
            ]
        ).to(t)
        if len(members)
        else t.new_zeros(t.shape)
        for t, members in zip(like, layout.cohorts, strict=True)
    ]
    estimate = 0.0
    for _ in range(max(1, iters)):
        norm = _dot(v, v, comm) ** 0.5
        if norm == 0.0:
            return 0.0
        v = [x / norm for x in v]
        sent = ops.messages(layout, v, maps)
        theirs = comm.peek({"v": EdgeTensor(sent, layout.messages)})["v"].data
        r = sent - theirs if weights is None else (sent - theirs) * weights
        w = ops.transpose_sum(layout, maps, r, v)
        estimate = _dot(v, w, comm)
        v = w
    return estimate
