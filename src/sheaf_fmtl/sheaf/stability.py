"""Largest eigenvalue of the sheaf Laplacian by power iteration on the stacked maps.

The coupling part of the theta step (eq. ``thetaupdate``), ``theta <- theta - alpha lam L_F theta``,
is stable only when ``alpha lam lambda_max(L_F) < 2``. With ``N(0, 1)`` maps (the paper's choice),
``P_ij^T P_ij`` alone has eigenvalues up to about ``(sqrt(d_i) + sqrt(d_ij))^2``, so a step size that
suits the local losses can make the coupling diverge; a few products with ``L_F`` (never formed)
estimate ``lambda_max`` from below.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import ops
from .layout import SheafLayout


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b, strict=True)))


def laplacian_lambda_max(
    layout: SheafLayout, like: Sequence[torch.Tensor], maps: ops.Maps, iters: int = 30, seed: int = 0
) -> float:
    """Rayleigh quotient of ``L_F`` after ``iters`` power iterations from a seeded random start,
    a lower bound of ``lambda_max(L_F)`` that approaches it as ``iters`` grows. ``like``: per-cohort
    tensors ``[C, d]`` giving the shapes, dtype and device of the thetas."""
    gen = torch.Generator().manual_seed(seed)
    v = [torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t) for t in like]
    estimate = 0.0
    for _ in range(max(1, iters)):
        norm = _dot(v, v) ** 0.5
        if norm == 0.0:
            return 0.0
        v = [x / norm for x in v]
        w = ops.laplacian_action(layout, v, maps)
        estimate = _dot(v, w)
        v = w
    return estimate
