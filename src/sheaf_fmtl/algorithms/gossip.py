"""Whole models gossiped along half-edges (D-PSGD, dFedU): the payload layout and the gathers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..messages import EdgeLayout, EdgeTensor, ServerTensor
from ..sheaf.graph import ClientGraph
from .base import Context, State
from .steps import require_single_cohort


class ModelGossip:
    """Whole models along half-edges: buffer position ``q`` is graph half-edge ``q`` (``src[q] ->
    dst[q]``) and carries ``theta_{src[q]}`` (``d`` floats); what arrives at ``q`` is ``theta_{dst[q]}``."""

    def __init__(self, graph: ClientGraph, dim: int, device: torch.device | str = "cpu") -> None:
        self.num_nodes = graph.num_nodes
        self.dim = dim
        self.layout = EdgeLayout(np.full(graph.num_half_edges, dim, np.int64), graph.rev.copy())
        self.src = torch.as_tensor(graph.src, dtype=torch.long, device=device)
        self.edges = torch.as_tensor(graph.edges, dtype=torch.long, device=device).reshape(-1, 2)

    def send(self, theta: torch.Tensor) -> EdgeTensor:
        """``theta [N, d]`` -> one copy per outgoing half-edge."""
        return EdgeTensor(theta[self.src].reshape(-1), self.layout)

    def received(self, incoming: EdgeTensor | ServerTensor) -> torch.Tensor:
        """``[H, d]``: row ``q`` is the neighbour's model ``theta_{dst[q]}``."""
        return incoming.data.view(-1, self.dim)

    def neighbour_sum(self, per_half_edge: torch.Tensor) -> torch.Tensor:
        """``[H, d] -> [N, d]``: ``out_i = sum_{q: src[q] = i} v_q``."""
        out = per_half_edge.new_zeros((self.num_nodes, self.dim))
        return out.index_add_(0, self.src, per_half_edge)

    def edge_differences(self, theta: torch.Tensor) -> torch.Tensor:
        """``[E, d]``: ``theta_i - theta_j`` per undirected edge ``{i, j}`` (for the penalty only)."""
        return theta[self.edges[:, 0]] - theta[self.edges[:, 1]]


@dataclass
class GossipState(State):
    gossip: ModelGossip | None = None
    grads: torch.Tensor | None = None  # [N, d] gradients taken in ``local``
    outgoing: torch.Tensor | None = None  # [N, d] the models sent this round
    mixing: tuple[torch.Tensor, torch.Tensor] | None = None  # D-PSGD: (w per half-edge [H, 1], w_ii [N, 1])


def gossip_init(ctx: Context, name: str) -> GossipState:
    """The common initial models of a one-cohort federation and the gossip along ``ctx.graph``."""
    require_single_cohort(ctx, name)
    thetas = ctx.init_thetas()
    return GossipState(thetas=thetas, gossip=ModelGossip(ctx.graph, thetas[0].shape[1], thetas[0].device))
