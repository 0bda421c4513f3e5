"""Whole models gossiped along half-edges (D-PSGD, dFedU): the payload layout and the gathers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from ...messages import Comm, EdgeLayout, EdgeTensor, ServerTensor
from ...sheaf.graph import ClientGraph
from ..protocol.algorithm import Context, State
from ..training.steps import require_single_cohort


class ModelGossip:
    """Whole models along the half-edges whose source is held here (every half-edge in one process,
    graph order): buffer position ``q`` is half-edge ``half_edges[q]`` (``i -> j``) and carries
    ``theta_i`` (``d`` floats); what arrives at ``q`` is ``theta_j``. Rows of ``theta`` are the held
    clients ``clients`` (global ids) in order."""

    def __init__(
        self,
        graph: ClientGraph,
        dim: int,
        device: torch.device | str = "cpu",
        clients: np.ndarray | None = None,
    ) -> None:
        self.clients = np.arange(graph.num_nodes) if clients is None else np.asarray(clients, np.int64)
        self.num_nodes = len(self.clients)
        self.dim = dim
        row = np.full(graph.num_nodes, -1, np.int64)
        row[self.clients] = np.arange(len(self.clients))
        self.half_edges = np.flatnonzero(row[graph.src] >= 0)
        slot = np.full(graph.num_half_edges, -1, np.int64)
        slot[self.half_edges] = np.arange(len(self.half_edges))
        sizes = np.full(len(self.half_edges), dim, np.int64)
        self.layout = EdgeLayout(sizes, slot[graph.rev[self.half_edges]], self.half_edges, sizes)
        self.src = torch.as_tensor(row[graph.src[self.half_edges]], dtype=torch.long, device=device)

    def on_half_edges(self, values: np.ndarray) -> np.ndarray:
        """``[2E] -> [H]``: a per-graph-half-edge array at the positions held here."""
        return values[self.half_edges]

    def on_clients(self, values: np.ndarray) -> np.ndarray:
        """``[N] -> [C]``: a per-client array at the rows held here."""
        return values[self.clients]

    def send(self, theta: torch.Tensor) -> EdgeTensor:
        """``theta [N, d]`` -> one copy per outgoing half-edge."""
        return EdgeTensor(theta.index_select(0, self.src).reshape(-1), self.layout)  # ~7x theta[src]

    def received(self, incoming: EdgeTensor | ServerTensor) -> torch.Tensor:
        """``[H, d]``: row ``q`` is the neighbour's model ``theta_{dst[q]}``."""
        return incoming.data.view(-1, self.dim)

    def heard(self, incoming: EdgeTensor | ServerTensor) -> torch.Tensor | None:
        """``[H, 1]`` bool: whether the neighbour's model arrived at half-edge ``q`` and passed
        validation (``None``: all did; runtime/engine/faults.py)."""
        heard = incoming.heard if isinstance(incoming, EdgeTensor) else None
        return None if heard is None else heard.view(-1, 1)

    def neighbour_sum(self, per_half_edge: torch.Tensor) -> torch.Tensor:
        """``[H, k] -> [N, k]``: ``out_i = sum_{q: src[q] = i} v_q``."""
        out = per_half_edge.new_zeros((self.num_nodes, *per_half_edge.shape[1:]))
        return out.index_add_(0, self.src, per_half_edge)

    def half_edge_differences(self, theta: torch.Tensor, comm: Comm) -> torch.Tensor:
        """``[H, d]``: ``theta_i - theta_j`` per held half-edge ``i -> j``, the neighbours' models by an
        uncounted exchange (for the penalty only; each edge appears once from each end)."""
        theirs = comm.peek({"model": self.send(theta)})["model"]
        return theta.index_select(0, self.src) - self.received(theirs)


@dataclass
class GossipState(State):
    gossip: ModelGossip | None = None
    grads: torch.Tensor | None = None  # [N, d] gradients taken in ``local``
    outgoing: torch.Tensor | None = None  # [N, d] the models sent this round
    mixing: tuple[torch.Tensor, torch.Tensor] | None = None  # D-PSGD: (w per half-edge [H, 1], w_ii [N, 1])
    # With a compressor (compressed.py, powergossip.py): exchanges so far (the draws' round, the
    # power iteration's side), the message being sent ([N, bytes], [H, bytes] or [H, floats]), the
    # public copies of the held clients' models [N, d] (under a schedule one per outgoing half-edge
    # [H, d]) and of their neighbours' per half-edge [H, d] (CHOCO), the low-rank factors per weight
    # matrix [H, side, r] and the differences they give [H, d] (PowerGossip).
    exchanges: int = 0
    wire: torch.Tensor | None = None
    estimate: torch.Tensor | None = None
    edge_estimates: torch.Tensor | None = None
    neighbour_estimates: torch.Tensor | None = None
    power_factors: list[torch.Tensor] = field(default_factory=list)
    edge_differences: torch.Tensor | None = None
    consensus_step: float | None = None  # the consensus step gamma that runs, and how it was chosen
    consensus_note: str | None = None
    client_rows: ClassVar[tuple[str, ...]] = (*State.client_rows, "estimate")


def gossip_init(ctx: Context, name: str) -> GossipState:
    """The common initial models of a one-cohort federation and the gossip along ``ctx.graph``."""
    require_single_cohort(ctx, name)
    thetas = ctx.init_thetas()
    clients = ctx.fed.cohorts[0].clients
    gossip = ModelGossip(ctx.graph, thetas[0].shape[1], thetas[0].device, clients)
    return GossipState(thetas=thetas, gossip=gossip)
