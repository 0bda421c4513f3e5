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
with ``estimates``, :func:`~.coupling_strength.refresh_limit`). ``consensus_step = null`` takes
half of it, at most 1.

Missing neighbours (``drop_prob``, ``link_drop_prob``): a copy is moved only by what arrives, and
an edge whose message did not arrive is left out of the round's consensus step, so a lost message
leaves the receiver's copy behind the sender's (CHOCO assumes reliable links).

Under a schedule (``graph_schedule`` other than ``fixed``, or ``join_round``) the edges that talk
change every round, and a single copy ``xhat_i`` would move while the neighbours on the edges that
were off did not see the message. So each client keeps one copy per edge instead: ``xhat_{i->j}``,
what ``j`` holds of ``x_i``. The message on half-edge ``i -> j`` is ``C(theta_i - xhat_{i->j})``
(drawn from the same ``(seed, round, sender)`` as the single copy's), and both ends move their copy
of ``x_i`` only in the rounds edge ``{i, j}`` talks: a schedule turns an edge on or off at both ends,
so ``i`` knows its message went out when ``j``'s arrived. The consensus step takes ``xhat_{i->j} -
xhat_{j->i}`` per half-edge, and the copies at the two ends of an edge stay equal. When every edge
talks every round the per-edge copies of ``x_i`` all equal the single copy, and the numbers are the
single copy's bit for bit; the cost is ``H`` encodes a round (one per half-edge, not one per client)
and one more ``[H, d]`` copy. A client sitting a round out (``drop_prob``) silences its edges at
both ends and keeps the copies equal; a lost link (``link_drop_prob``) is one direction only, which
the sender cannot know, and still leaves the receiver's copy behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ...compression import Compressor, Draw, make_compressor
from ...config import RunConfig
from ...messages import EdgeTensor
from ...sheaf.graph import ClientGraph
from ..protocol.algorithm import Context
from ..training.coupling_strength import refresh_limit
from .payload import GossipState, ModelGossip
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


def per_edge_copies(config: RunConfig) -> bool:
    """Whether the run has a schedule (``graph_schedule`` or ``join_round``: the rule of
    :meth:`~sheaf_fmtl.runtime.engine.schedule.Schedule.from_config`), so CHOCO keeps a copy per edge."""
    return config.graph_schedule != "fixed" or bool(config.join_round.strip())


class CompressedExchange:
    """The compressed messages of one run (or rank) over the half-edges of ``gossip``, and the
    copies they move: ``neighbour_estimates [H, d]`` (at half-edge ``i -> j``, ``i``'s copy of
    ``x_j``) and the held clients' own copies, one per client (``estimate [N, d]``) or, with
    ``per_edge``, one per outgoing half-edge (``edge_estimates [H, d]``: ``xhat_{i->j}``)."""

    def __init__(
        self, config: RunConfig, gossip: ModelGossip, graph: ClientGraph, per_edge: bool = False
    ) -> None:
        self.compressor: Compressor = make_compressor(
            config.compressor, fraction=config.compression, quantization_bits=config.quantization_bits
        )
        self.gossip, self.seed, self.dim, self.per_edge = gossip, config.seed, gossip.dim, per_edge
        self.width = self.compressor.message_bits(self.dim) // 8  # bytes per message
        self.layout = gossip.layout.with_sizes(np.full(len(gossip.half_edges), self.width, np.int64))
        device = gossip.src.device
        self.senders = torch.as_tensor(gossip.clients, dtype=torch.long, device=device)
        self.edge_senders = torch.as_tensor(graph.src[gossip.half_edges], dtype=torch.long, device=device)
        self.heard_from = torch.as_tensor(graph.dst[gossip.half_edges], dtype=torch.long, device=device)

    @property
    def omega(self) -> float:
        return self.compressor.omega(self.dim)

    def message_bits(self, exchange: int) -> int:
        """Bits of one message on one half-edge (every round the same)."""
        return self.compressor.message_bits(self.dim)

    def init(self, state: GossipState) -> None:
        theta = state.thetas[0]
        halves = len(self.gossip.half_edges)
        if self.per_edge:
            state.edge_estimates = theta.new_zeros(halves, self.dim)
        else:
            state.estimate = torch.zeros_like(theta)
        state.neighbour_estimates = theta.new_zeros(halves, self.dim)
        state.exchanges = 0

    def send(self, state: GossipState, theta: torch.Tensor) -> EdgeTensor:
        """Encode ``C(theta_i - xhat_i)`` once per held client, a copy along each outgoing half-edge;
        with per-edge copies ``C(theta_i - xhat_{i->j})`` once per held half-edge."""
        if self.per_edge:
            assert state.edge_estimates is not None
            mine = theta.index_select(0, self.gossip.src) - state.edge_estimates
            state.wire = self.compressor.encode(mine, Draw(self.seed, state.exchanges, self.edge_senders))
            return EdgeTensor(state.wire.reshape(-1), self.layout)
        assert state.estimate is not None
        draw = Draw(self.seed, state.exchanges, self.senders)
        state.wire = self.compressor.encode(theta - state.estimate, draw)
        return EdgeTensor(state.wire.index_select(0, self.gossip.src).reshape(-1), self.layout)

    def receive(self, state: GossipState, incoming: EdgeTensor) -> torch.Tensor | None:
        """Move the copies by the round's messages: the own copy by the decoded message sent (per
        edge: where the edge talked, known from ``heard``), each neighbour's by the message that
        arrived from it. Returns ``heard [H, 1]`` (``None``: all)."""
        assert state.neighbour_estimates is not None and state.wire is not None
        r = state.exchanges
        heard = self.gossip.heard(incoming)
        if self.per_edge:
            assert state.edge_estimates is not None
            own = self.compressor.decode(state.wire, self.dim, Draw(self.seed, r, self.edge_senders))
            state.edge_estimates = state.edge_estimates + _where_heard(own, heard)
        else:
            assert state.estimate is not None
            own = self.compressor.decode(state.wire, self.dim, Draw(self.seed, r, self.senders))
            state.estimate = state.estimate + own
        wire = incoming.data.view(-1, self.width)
        theirs = self.compressor.decode(wire, self.dim, Draw(self.seed, r, self.heard_from))
        state.neighbour_estimates = state.neighbour_estimates + _where_heard(theirs, heard)
        state.exchanges, state.wire = r + 1, None
        return heard

    def differences(self, state: GossipState, heard: torch.Tensor | None) -> torch.Tensor:
        """``[H, d]``: ``xhat_i - xhat_j`` per held half-edge ``i -> j`` (per edge: ``xhat_{i->j} -
        xhat_{j->i}``; zero where nothing arrived)."""
        assert state.neighbour_estimates is not None
        if self.per_edge:
            assert state.edge_estimates is not None
            mine = state.edge_estimates
        else:
            assert state.estimate is not None
            mine = state.estimate.index_select(0, self.gossip.src)
        return _where_heard(mine - state.neighbour_estimates, heard)


def _where_heard(values: torch.Tensor, heard: torch.Tensor | None) -> torch.Tensor:
    """``values [H, d]`` where ``heard [H, 1]`` (``None``: all), zero elsewhere."""
    return values if heard is None else torch.where(heard, values, values.new_zeros(()))


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
        compressed = CompressedExchange(config, gossip, ctx.graph, per_edge_copies(config))
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
