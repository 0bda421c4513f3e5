"""Sheaf-FMTL, the paper's Algorithm 1 (synchronous; every client uses round-k messages).

Theta step (eq. ``thetaupdate``):
    ``theta_i <- theta_i - alpha (g_i + lam sum_j P_ij^T (P_ij theta_i - P_ji theta_j))``
Map step with the new thetas (eq. ``pijaupdate``):
    ``P_ij <- P_ij - eta lam (P_ij theta_i - P_ji theta_j) theta_i^T``
``eta = 0`` keeps the maps fixed (the special cases) and skips the second exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..config import RunConfig
from ..runtime.transport import EdgeTensor, Payload
from ..sheaf import ops
from ..sheaf.layout import SheafLayout, build_layout
from ..sheaf.maps import MAP_DTYPES, init_maps
from .base import Context, State, register


@dataclass
class SheafState(State):
    layout: SheafLayout | None = None
    maps: list[torch.Tensor] | None = None
    grads: list[torch.Tensor] | None = None
    sent: torch.Tensor | None = None  # own outgoing messages of the current phase


@register("sheaf-fmtl")
class SheafFMTL:
    name = "sheaf-fmtl"

    def __init__(self, config: RunConfig) -> None:
        self.lam = config.lam
        self.alpha = config.alpha
        self.eta = config.eta
        self.local_steps = config.local_steps

    def init(self, ctx: Context) -> SheafState:
        cfg = ctx.config
        layout = build_layout(ctx.graph, ctx.fed.node_dims(), ctx.fed.cohort_of, cfg.gamma)
        maps = init_maps(
            layout, cfg.map_init, cfg.map_scale, dtype=MAP_DTYPES[cfg.map_dtype], generator=ctx.init_gen,
            device=cfg.device,
        )
        return SheafState(thetas=ctx.init_thetas(), layout=layout, maps=maps)

    def local(self, state: SheafState, ctx: Context) -> SheafState:  # type: ignore[override]
        state.grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
        return state

    def phases(self, state: SheafState) -> int:  # type: ignore[override]
        return 2 if self.eta > 0 and self.lam > 0 else 1

    def send(self, state: SheafState, phase: int, ctx: Context) -> Payload:  # type: ignore[override]
        assert state.layout is not None and state.maps is not None
        state.sent = ops.messages(state.layout, state.thetas, state.maps)
        return {"msg": EdgeTensor(state.sent, state.layout.messages)}

    def receive(self, state: SheafState, incoming: Payload, phase: int, ctx: Context) -> SheafState:  # type: ignore[override]
        assert state.layout is not None and state.maps is not None and state.sent is not None
        layout, maps, theirs = state.layout, state.maps, incoming["msg"].data
        if phase == 0:
            grads = state.grads
            assert grads is not None
            for step in range(self.local_steps):
                if step > 0:  # further local steps: fresh gradients, the same received messages
                    grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
                    state.sent = ops.messages(layout, state.thetas, maps)
                coupling = ops.transpose_sum(layout, maps, state.sent - theirs, state.thetas)
                state.thetas = [
                    t - self.alpha * (g + self.lam * c) for t, g, c in zip(state.thetas, grads, coupling, strict=True)
                ]
        else:
            residual = state.sent - theirs
            for b, p, r in zip(layout.buckets, maps, layout.bucket_messages(residual), strict=True):
                ops.rank_one_update_(p, r, state.thetas[b.cohort][b.src_pos], -self.eta * self.lam)
        return state

    def penalty(self, state: SheafState, ctx: Context) -> tuple[float, float]:  # type: ignore[override]
        assert state.layout is not None and state.maps is not None
        e = float(ops.energy(state.layout, state.thetas, state.maps))
        return 0.5 * self.lam * e, e

    def checkpoint(self, state: SheafState, ctx: Context) -> dict[str, Any]:  # type: ignore[override]
        assert state.layout is not None and state.maps is not None
        layout = state.layout
        return {
            "maps": [m.cpu() for m in state.maps],
            "bucket_half_edges": [torch.as_tensor(b.half_edges) for b in layout.buckets],
            "map_norms": ops.map_frobenius(layout, state.maps),
        }
