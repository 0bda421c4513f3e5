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

With ``local_epochs = E > 0`` (FedU's reference code and the Sheaf-FMTL authors' protocol), a round
is ``E`` passes of mini-batch SGD on ``f_i``, then the exchange and the coupling step
``theta_i <- theta_i - alpha lam sum_j a_ij (theta_i - theta_j)``.
Start-up: ``alpha lam lambda_max(graph Laplacian) >= 2`` makes the coupling diverge and is refused.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from ..config import RunConfig
from ..runtime.transport import Payload
from .base import Context, register
from .common import GossipState, coupling_energy, gossip_init, gradient, require_stable_coupling, sgd_steps


@register("dfedu")
class DFedU:
    name = "dfedu"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.lam = config.lam
        self.local_steps = config.local_steps
        self.notes: list[str] = []

    def init(self, ctx: Context) -> GossipState:
        state = gossip_init(ctx, self.name)
        if ctx.config.stability_check and self.lam > 0:
            lambda_max = float(nx.laplacian_spectrum(ctx.graph.to_networkx()).max())
            note = require_stable_coupling(self.alpha, self.lam, lambda_max, "graph Laplacian", maps=False)
            if note:
                self.notes.append(note)
        return state

    def local(self, state: GossipState, ctx: Context) -> GossipState:  # type: ignore[override]
        if ctx.epoch_mode:  # E passes of plain SGD; the coupling step follows the exchange
            state.thetas = [sgd_steps(ctx, state, state.thetas[0], ctx.local_steps(), self.alpha)]
            state.grads = None
            return state
        state.grads = gradient(ctx, state.thetas[0], state)
        return state

    def phases(self, state: GossipState) -> int:  # type: ignore[override]
        return 1

    def send(self, state: GossipState, phase: int, ctx: Context) -> Payload:  # type: ignore[override]
        assert state.gossip is not None
        return {"model": state.gossip.send(state.thetas[0])}

    def receive(self, state: GossipState, incoming: Payload, phase: int, ctx: Context) -> GossipState:  # type: ignore[override]
        gossip, grads = state.gossip, state.grads
        assert gossip is not None
        theirs = gossip.received(incoming["model"])
        theta = state.thetas[0]
        if grads is None:  # local-epochs mode: the coupling step alone
            coupling = gossip.neighbour_sum(theta[gossip.src] - theirs)
            state.thetas = [theta - (self.alpha * self.lam) * coupling]
            return state
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

    def diagnose(self, state: GossipState, ctx: Context) -> list[str]:  # type: ignore[override]
        notes, self.notes = self.notes, []
        return notes

    def checkpoint(self, state: GossipState, ctx: Context) -> dict[str, Any]:  # type: ignore[override]
        return {}
