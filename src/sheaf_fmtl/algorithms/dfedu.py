"""dFedU: decentralized FedU of Dinh et al., "A New Look and Convergence Rate of Federated
Multi-Task Learning with Laplacian Regularization" (2022), with ``a_ij = 1`` (the paper's baseline).

Objective (paper eq. ``conventional FMTL objective``, each undirected edge counted once):
    ``sum_i f_i(theta_i) + lam/2 sum_{e={i,j}} a_ij ||theta_i - theta_j||^2``.
Round: every client sends its whole model ``theta_i`` (``d`` floats) to each neighbour, then
    ``theta_i <- theta_i - alpha (g_i + lam sum_j a_ij (theta_i - theta_j))``,
``g_i`` a mini-batch gradient at the current ``theta_i``. With ``local_steps > 1`` the further steps
take fresh gradients and the current ``theta_i`` against the same received ``theta_j`` (as
Sheaf-FMTL does), so this equals Sheaf-FMTL with fixed maps ``P_ij = sqrt(a_ij) I`` (paper,
"Connection with conventional FMTL"). ``thetas``: the personalised models ``theta_i``.
"""

from __future__ import annotations

from typing import Any

from ..config import RunConfig
from ..runtime.transport import Payload
from .base import Context, register
from .common import GossipState, coupling_energy, gossip_init, gradient


@register("dfedu")
class DFedU:
    name = "dfedu"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.lam = config.lam
        self.local_steps = config.local_steps

    def init(self, ctx: Context) -> GossipState:
        return gossip_init(ctx, self.name)

    def local(self, state: GossipState, ctx: Context) -> GossipState:  # type: ignore[override]
        state.grads = gradient(ctx, state.thetas[0], state)
        return state

    def phases(self, state: GossipState) -> int:  # type: ignore[override]
        return 1

    def send(self, state: GossipState, phase: int, ctx: Context) -> Payload:  # type: ignore[override]
        assert state.gossip is not None
        return {"model": state.gossip.send(state.thetas[0])}

    def receive(self, state: GossipState, incoming: Payload, phase: int, ctx: Context) -> GossipState:  # type: ignore[override]
        gossip, grads = state.gossip, state.grads
        assert gossip is not None and grads is not None
        theirs = gossip.received(incoming["model"])
        theta = state.thetas[0]
        for step in range(self.local_steps):
            if step > 0:
                grads = gradient(ctx, theta, state)
            coupling = gossip.neighbour_sum(theta[gossip.src] - theirs)
            theta = theta - self.alpha * (grads + self.lam * coupling)
        state.thetas = [theta]
        return state

    def penalty(self, state: GossipState, ctx: Context) -> tuple[float, float]:  # type: ignore[override]
        assert state.gossip is not None
        return coupling_energy(state.gossip.edge_differences(state.thetas[0]), self.lam)

    def checkpoint(self, state: GossipState, ctx: Context) -> dict[str, Any]:  # type: ignore[override]
        return {}
