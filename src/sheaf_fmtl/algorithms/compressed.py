"""Compressed gossip of whole models, CHOCO-SGD's way (Koloskova, Stich and Jaggi, ICML 2019,
Algorithm 2; Koloskova, Lin, Stich and Jaggi, ICLR 2020), for the model-gossiping baselines
(``dfedu``, ``dpsgd``) with ``compressor`` one of :mod:`sheaf_fmtl.compression`'s.

Every client ``i`` has a public copy ``xhat_i`` of its model (zero at the start), held by itself
and by each neighbour. A round's message is ``q_i = C(theta_i - xhat_i)``, one encoded byte string
broadcast along every outgoing half-edge (its bits counted per half-edge, from the bytes); sender
and receivers then add the decoded ``q_i`` to their copy of ``xhat_i``, so the copies agree bit for
bit. What a compressor drops stays in ``theta_i - xhat_i`` and is sent in later rounds (error
feedback). The coupling is a consensus step between copies, zero-sum on every edge:

- dFedU: ``theta_i <- theta_i - gamma alpha lam sum_j a_ij (xhat_i - xhat_j)``;
- D-PSGD (CHOCO-SGD): ``x_i <- x_i + gamma sum_j w_ij (xhat_j - xhat_i)``,

``gamma`` the ``consensus_step``. A copy trails its model by what the compressor has not sent yet;
with a compressor of quality ``omega`` (``E||C(x) - x||^2 <= (1 - omega) ||x||^2``) a residual is
re-applied for about ``1/omega`` rounds, so the step is stable for ``gamma mu <= 2 omega / (2 -
omega)`` (``mu``: the consensus operator's largest eigenvalue; the same bound as ``maps=redrawn``
with ``estimates``, :func:`~.coordinate_stability.refresh_limit`). ``consensus_step = null`` takes
half of it, at most 1.

Missing neighbours (``drop_prob``, ``link_drop_prob``): a copy is moved only by what arrives, and
an edge whose message did not arrive is left out of the round's consensus step, so a lost message
leaves the receiver's copy behind the sender's (CHOCO assumes reliable links).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ..compression import Compressor, Draw, make_compressor
from ..config import RunConfig
from ..messages import EdgeTensor
from ..sheaf.graph import ClientGraph
from .base import Context
from .coordinate_stability import refresh_limit
from .gossip import GossipState, ModelGossip
from .powergossip import PowerGossipExchange


@dataclass(frozen=True)
class ConsensusStep:
    """The consensus step ``gamma`` that runs and how it was chosen (``summary.json``)."""

    gamma: float
    why: str


def consensus_step(config: RunConfig, omega: float, mu: float, scale: float = 1.0) -> ConsensusStep:
    """``consensus_step``, or half the stability limit ``2 omega / (2 - omega)`` of the step
    ``gamma scale mu`` (``scale``: dFedU's ``alpha lam``, 1 for D-PSGD), at most 1."""
    if config.consensus_step is not None:
        return ConsensusStep(config.consensus_step, "consensus_step as given")
    limit = refresh_limit(omega)
    step = scale * mu
    gamma = 1.0 if step <= 0 else min(1.0, 0.5 * limit / step)
    gamma = float(f"{gamma:.4g}")
    return ConsensusStep(
        gamma,
        f"consensus_step = min(1, (omega/(2 - omega)) / (scale mu)) = {gamma:.4g} (omega = {omega:.4g}, "
        f"mu = {mu:.4g}, scale = {scale:.4g})",
    )


class CompressedExchange:
    """The compressed messages of one run (or rank) over the half-edges of ``gossip``, and the
    copies they move (``GossipState.estimate [N, d]``: the held clients' own copies;
    ``neighbour_estimates [H, d]``: at half-edge ``i -> j``, ``i``'s copy of ``xhat_j``)."""

    def __init__(self, config: RunConfig, gossip: ModelGossip, graph: ClientGraph) -> None:
        self.compressor: Compressor = make_compressor(
            config.compressor, fraction=config.compression, quantization_bits=config.quantization_bits
        )
        self.gossip, self.seed, self.dim = gossip, config.seed, gossip.dim
        self.width = self.compressor.message_bits(self.dim) // 8  # bytes per message
        self.layout = gossip.layout.with_sizes(np.full(len(gossip.half_edges), self.width, np.int64))
        device = gossip.src.device
        self.senders = torch.as_tensor(gossip.clients, dtype=torch.long, device=device)
        self.heard_from = torch.as_tensor(graph.dst[gossip.half_edges], dtype=torch.long, device=device)

    @property
    def omega(self) -> float:
        return self.compressor.omega(self.dim)

    def message_bits(self, exchange: int) -> int:
        """Bits of one message on one half-edge (every round the same)."""
        return self.compressor.message_bits(self.dim)

    def init(self, state: GossipState) -> None:
        theta = state.thetas[0]
        state.estimate = torch.zeros_like(theta)
        state.neighbour_estimates = theta.new_zeros(len(self.gossip.half_edges), self.dim)
        state.exchanges = 0

    def send(self, state: GossipState, theta: torch.Tensor) -> EdgeTensor:
        """Encode ``C(theta_i - xhat_i)`` once per held client; a copy along each outgoing half-edge."""
        assert state.estimate is not None
        draw = Draw(self.seed, state.exchanges, self.senders)
        state.wire = self.compressor.encode(theta - state.estimate, draw)
        return EdgeTensor(state.wire.index_select(0, self.gossip.src).reshape(-1), self.layout)

    def receive(self, state: GossipState, incoming: EdgeTensor) -> torch.Tensor | None:
        """Move the copies by the round's messages: the own copy by the decoded message sent, each
        neighbour's by the message that arrived from it. Returns ``heard [H, 1]`` (``None``: all)."""
        assert state.estimate is not None and state.neighbour_estimates is not None
        assert state.wire is not None
        r = state.exchanges
        own = self.compressor.decode(state.wire, self.dim, Draw(self.seed, r, self.senders))
        state.estimate = state.estimate + own
        wire = incoming.data.view(-1, self.width)
        theirs = self.compressor.decode(wire, self.dim, Draw(self.seed, r, self.heard_from))
        heard = self.gossip.heard(incoming)
        if heard is not None:
            theirs = torch.where(heard, theirs, theirs.new_zeros(()))
        state.neighbour_estimates = state.neighbour_estimates + theirs
        state.exchanges, state.wire = r + 1, None
        return heard

    def differences(self, state: GossipState, heard: torch.Tensor | None) -> torch.Tensor:
        """``[H, d]``: ``xhat_i - xhat_j`` per held half-edge ``i -> j`` (zero where nothing arrived)."""
        assert state.estimate is not None and state.neighbour_estimates is not None
        diff = state.estimate.index_select(0, self.gossip.src) - state.neighbour_estimates
        return diff if heard is None else torch.where(heard, diff, diff.new_zeros(()))


class DifferenceExchange(Protocol):
    """What the compressed baselines need of an exchange: messages, and per half-edge ``i -> j`` the
    difference ``theta_i - theta_j`` it lets ``i`` see (CHOCO's copies; PowerGossip's low rank)."""

    def init(self, state: GossipState) -> None: ...

    def message_bits(self, exchange: int) -> int: ...

    def send(self, state: GossipState, theta: torch.Tensor) -> EdgeTensor: ...

    def receive(self, state: GossipState, incoming: EdgeTensor) -> torch.Tensor | None: ...

    def differences(self, state: GossipState, heard: torch.Tensor | None) -> torch.Tensor: ...


def make_exchange(
    config: RunConfig, ctx: Context, state: GossipState, scale: float, mu: float
) -> DifferenceExchange | None:
    """The exchange of ``config.compressor`` (``None`` for ``none``), its copies or factors set up in
    ``state``, with the consensus step that runs (``state.consensus_step``; its reason in
    ``state.consensus_note``) for a consensus operator of largest eigenvalue ``mu`` scaled by
    ``scale`` (dFedU: ``alpha lam``; D-PSGD: 1)."""
    if config.compressor == "none":
        return None
    gossip = state.gossip
    assert gossip is not None
    exchange: DifferenceExchange
    if config.compressor == "powergossip":  # a projection of the difference: the uncompressed step
        shapes = list(ctx.fed.cohorts[0].shapes)
        exchange = PowerGossipExchange(shapes, config.rank, gossip, ctx.graph, config.seed)
        given = config.consensus_step
        why = "consensus_step as given" if given else "consensus_step = 1 (PowerGossip's diffusion rate)"
        step = ConsensusStep(given or 1.0, why)
    else:
        compressed = CompressedExchange(config, gossip, ctx.graph)
        exchange, step = compressed, consensus_step(config, compressed.omega, mu, scale)
    exchange.init(state)
    state.consensus_step, state.consensus_note = step.gamma, step.why
    return exchange


def analytic_bits(exchange: DifferenceExchange | None, state: GossipState, rounds: int) -> int:
    """Bits the held half-edges send in ``rounds`` rounds by the formula (every message delivered):
    whole float32 models without a compressor."""
    assert state.gossip is not None
    halves = len(state.gossip.half_edges)
    if exchange is None:
        return halves * rounds * state.gossip.dim * state.thetas[0].element_size() * 8
    return halves * sum(exchange.message_bits(t) for t in range(rounds))
