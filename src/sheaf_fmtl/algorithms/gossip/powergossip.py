"""PowerGossip (Vogels, Karimireddy and Jaggi, "Practical Low-Rank Communication Compression in
Decentralized Deep Learning", NeurIPS 2020): the difference of two neighbours' weight matrices,
approximated by one step of power iteration a round, warm-started, for the model-gossiping
baselines (``dfedu``, ``dpsgd``) with ``compressor = powergossip``.

Each parameter with two or more axes is a matrix ``X`` (``m x n``: its first axis against the
rest; a convolution's filters by their inputs), each other parameter (biases) travels whole. Edge
``e = {a, b}`` (``a < b``) keeps, at both ends, one factor per matrix, drawn from ``(seed, e)`` at
the start. In exchange ``t`` each end orthonormalises the factor (QR), ``F``, and sends its
product with it: ``X F`` (``m x r``) when ``t`` is even, ``X^T F`` (``n x r``) when odd (``r =
min(rank, m, n)``). From the two messages both ends form ``D = (X_a - X_b) F`` (or its transpose
form), and

    ``X_a - X_b ~ D F^T`` (even ``t``),  ``F D^T`` (odd ``t``),

a rank-``r`` projection of the difference (never longer than it); ``D`` is the next exchange's
factor (warm start, alternating sides as the reference code does). The biases' difference is
exact. The coupling then uses these differences where the uncompressed baselines use ``theta_i -
theta_j``: dFedU ``theta_i <- theta_i - gamma alpha lam sum_j a_ij (theta_i - theta_j)~``, D-PSGD
``x_i <- x_i - gamma sum_j w_ij (x_i - x_j)~`` (``gamma``: ``consensus_step``, 1 by default, as
the reference's diffusion rate). Bits per half-edge and exchange: ``32 (sum_k r_k m_k + biases)``
for even ``t``, ``32 (sum_k r_k n_k + biases)`` for odd ``t``.

The two ends of an edge must see the same messages to keep the same factors, so PowerGossip runs on
reliable links only (the config refuses it with ``drop_prob`` or ``link_drop_prob``); a message
rejected on arrival (not finite) leaves its edge out of the round's step.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...messages import EdgeTensor
from ...sheaf.graph import ClientGraph
from ...sheaf.selection import dense_maps
from .payload import GossipState, ModelGossip

#: Stream of the factors' initial draws (:func:`~sheaf_fmtl.sheaf.selection.dense_maps`'s round).
_FACTOR_STREAM = 1 << 20


class PowerGossipExchange:
    """The low-rank messages of one run (or rank) over the half-edges of ``gossip``, for a model of
    parameter shapes ``shapes`` (flattened in that order into ``theta``)."""

    def __init__(
        self, shapes: list[torch.Size], rank: int, gossip: ModelGossip, graph: ClientGraph, seed: int
    ) -> None:
        self.gossip, self.seed, self.dim = gossip, seed, gossip.dim
        self.matrices: list[tuple[int, int, int, int]] = []  # (offset, m, n, r)
        vector: list[torch.Tensor] = []
        offset = 0
        for shape in shapes:
            size = math.prod(shape)
            if len(shape) >= 2:
                m, n = int(shape[0]), size // int(shape[0])
                self.matrices.append((offset, m, n, min(rank, m, n)))
            else:
                vector.append(torch.arange(offset, offset + size))
            offset += size
        device = gossip.src.device
        self.vector = (torch.cat(vector) if vector else torch.zeros(0, dtype=torch.long)).to(device)
        halves = gossip.half_edges
        self.edge = halves // 2  # graph half-edge 2e runs a -> b (a < b), 2e + 1 runs b -> a
        signs = np.where(halves % 2 == 0, 1.0, -1.0)
        self.sign = torch.as_tensor(signs, dtype=torch.float32, device=device)[:, None, None]
        self.graph = graph

    def message_size(self, exchange: int) -> int:
        """Floats of one message on one half-edge in exchange ``exchange``."""
        side = 1 if exchange % 2 == 0 else 2
        return sum(r * dims[side - 1] for _, *dims, r in self.matrices) + len(self.vector)

    def message_bits(self, exchange: int) -> int:
        return 32 * self.message_size(exchange)

    def init(self, state: GossipState) -> None:
        """Each edge's first factors (``n x r``, the right side), drawn from ``(seed, edge)``."""
        theta = state.thetas[0]
        edges = np.arange(self.graph.num_edges)
        factors = []
        for k, (_, _, n, r) in enumerate(self.matrices):
            draws = dense_maps("gaussian", self.seed, edges, _FACTOR_STREAM + k, r, n, theta.device)
            factors.append(draws.transpose(1, 2).to(theta.dtype)[torch.as_tensor(self.edge)])
        state.power_factors = factors
        state.exchanges = 0

    def _matrices(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x[:, o : o + m * n].view(-1, m, n) for o, m, n, _ in self.matrices]

    def send(self, state: GossipState, theta: torch.Tensor) -> EdgeTensor:
        """``X F`` (or ``X^T F``) per matrix and the biases, per outgoing half-edge."""
        mine = theta.index_select(0, self.gossip.src)
        even = state.exchanges % 2 == 0
        factors = [torch.linalg.qr(f).Q for f in state.power_factors]  # orthonormal columns
        parts = [
            (x if even else x.transpose(1, 2)) @ f for x, f in zip(self._matrices(mine), factors, strict=True)
        ]
        msg = torch.cat([p.flatten(1) for p in parts] + [mine[:, self.vector]], dim=1)
        state.power_factors, state.wire = factors, msg
        size = msg.shape[1]
        layout = self.gossip.layout.with_sizes(np.full(len(self.gossip.half_edges), size, np.int64))
        return EdgeTensor(msg.reshape(-1), layout)

    def receive(self, state: GossipState, incoming: EdgeTensor) -> torch.Tensor | None:
        """Form each edge's approximated difference (``state.edge_differences [H, d]``: ``theta_i -
        theta_j`` as approximated) and the next factors. Returns ``heard [H, 1]`` (``None``: all)."""
        mine = state.wire
        assert mine is not None
        theirs = incoming.data.view(mine.shape)
        heard = self.gossip.heard(incoming)
        canon = (mine - theirs).unsqueeze(2) * self.sign  # M_a - M_b, the same numbers at both ends
        even = state.exchanges % 2 == 0
        diff = mine.new_zeros(len(mine), self.dim)
        start, nxt = 0, []
        for (o, m, n, r), f in zip(self.matrices, state.power_factors, strict=True):
            size = r * (m if even else n)
            d = canon[:, start : start + size, 0].reshape(len(mine), -1, r)
            start += size
            approx = d @ f.transpose(1, 2) if even else f @ d.transpose(1, 2)  # [H, m, n]
            diff[:, o : o + m * n] = (self.sign * approx).flatten(1)
            nxt.append(d)
        diff[:, self.vector] = mine[:, start:] - theirs[:, start:]
        state.power_factors = nxt
        state.edge_differences = diff if heard is None else torch.where(heard, diff, diff.new_zeros(()))
        state.exchanges, state.wire = state.exchanges + 1, None
        return heard

    def differences(self, state: GossipState, heard: torch.Tensor | None) -> torch.Tensor:
        """``[H, d]``: the approximated ``theta_i - theta_j`` of the last exchange."""
        assert state.edge_differences is not None
        return state.edge_differences
