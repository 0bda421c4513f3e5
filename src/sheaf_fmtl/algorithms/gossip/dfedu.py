"""dFedU: decentralized FedU of Dinh et al., "A New Look and Convergence Rate of Federated
Multi-Task Learning with Laplacian Regularization" (2022), with the graph's edge weights ``a_ij``
(1 unless the edge list gives a third column; ``a_ij = 1`` is the paper's baseline).

Objective (paper eq. (9) ``conventional FMTL objective``, each undirected edge counted once):
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
Start-up: ``alpha lam lambda_max(weighted graph Laplacian) >= 2`` makes the coupling diverge and is refused.

Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages): a client skips the term
``a_ij (theta_i - theta_j)`` of each neighbour whose model did not arrive, for that round. A client
that sits a round out sends nothing, receives nothing and keeps its model (the runtime puts it back).

With a ``compressor`` the neighbours' models are public copies moved by compressed differences
(CHOCO-SGD, :mod:`.compressed`) or low-rank differences (:mod:`.powergossip`), and the coupling
step, once a round, is ``theta_i <- theta_i - alpha lam gamma sum_j a_ij (theta_i - theta_j)~``
with ``(theta_i - theta_j)~`` the difference of the copies (or PowerGossip's approximation) and
``gamma`` the ``consensus_step``.
"""

from __future__ import annotations

import torch

from ...config import RunConfig
from ...messages import EdgeTensor, Payload, ServerTensor
from ..protocol.algorithm import Algorithm, Context, register
from ..training.coupling import require_stable_coupling
from ..training.coupling_step import CouplingStep, measured, reference_step
from ..training.coupling_strength import scheduled_lambda_max
from ..training.epoch import local_epochs
from ..training.steps import coupled_step, gradient, sgd_steps
from .compressed import DifferenceExchange, analytic_bits, make_exchange
from .payload import GossipState, ModelGossip, gossip_init


def _neighbour_flops(config: RunConfig, dim: int, clients: int, half_edges: int) -> int:
    """A round's coupling combinations: one per half-edge and coupling step."""
    steps = 1 if config.local_epochs > 0 else config.local_steps
    return 2 * dim * half_edges * steps


@register(
    "dfedu",
    display="dFedU",
    step_keys=("alpha", "lam"),
    reads=("lam", "compressor"),
    color=1,
    aggregation=_neighbour_flops,
)
class DFedU(Algorithm[GossipState]):
    name = "dfedu"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.lam = config.lam_value
        self.local_steps = config.local_steps
        self.notes: list[str] = []
        self.a_half: torch.Tensor | None = None  # [H, 1] a_ij per half-edge (None: all 1)
        self.exchange: DifferenceExchange | None = None  # a compressor's (compressed.py); None: whole models
        self.gamma = 1.0  # the consensus step scaling the coupling (with a compressor)
        self.coupling = CouplingStep(config, self.lam)  # the step after the local epochs (coupling_step.py)

    def _coupling(
        self, gossip: ModelGossip, theta: torch.Tensor, theirs: torch.Tensor, heard: torch.Tensor | None
    ) -> torch.Tensor:
        """``[N, d]``: ``sum_j a_ij (theta_i - theta_j)``, the weighted graph Laplacian times theta,
        over the neighbours heard (``heard [H, 1]``, ``None``: all)."""
        diff = theta.index_select(0, gossip.src) - theirs
        if heard is not None:
            diff = torch.where(heard, diff, diff.new_zeros(()))
        return gossip.neighbour_sum(diff if self.a_half is None else self.a_half * diff)

    def init(self, ctx: Context) -> GossipState:
        state = gossip_init(ctx, self.name)
        if ctx.graph.weighted:
            ref = state.thetas[0]
            assert state.gossip is not None
            a = state.gossip.on_half_edges(ctx.graph.half_edge_weights())
            self.a_half = torch.as_tensor(a, dtype=ref.dtype, device=ref.device)[:, None]
        compressing = ctx.config.compressor != "none"
        # (a measured coupling step is capped each round instead: coupling_step.py)
        checking = ctx.config.stability_check and self.lam > 0 and not measured(ctx.config)
        lambda_max = scheduled_lambda_max(ctx.config, ctx.graph) if compressing or checking else 0.0
        step = reference_step(ctx.config)
        if compressing:  # (with lam = 0 nothing is coupled, but the messages are sent and counted)
            self.exchange = make_exchange(ctx.config, ctx, state, step * self.lam, lambda_max)
            self.gamma = state.consensus_step or 1.0
        if checking:
            what = "graph Laplacian" + (f", consensus step {self.gamma:g}" if compressing else "")
            note = require_stable_coupling(step, self.lam * self.gamma, lambda_max, what, maps=False)
            if note:
                self.notes.append(note)

        def largest() -> float:  # exact averaging along the top eigenvector, the consensus step's included
            top = (lambda_max or scheduled_lambda_max(ctx.config, ctx.graph)) * self.gamma
            return 1.0 / top if top > 0 else float("inf")

        self.coupling.start(ctx, largest)
        return state

    def local(self, state: GossipState, ctx: Context) -> GossipState:
        if ctx.epoch_mode:  # E passes of plain SGD; the coupling step follows the exchange
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            state.grads = None
            return state
        state.grads = gradient(ctx, state.thetas[0], state)
        return state

    def send(self, state: GossipState, phase: int, ctx: Context) -> Payload:
        assert state.gossip is not None
        if self.exchange is not None:
            return {"model": self.exchange.send(state, state.thetas[0])}
        return {"model": state.gossip.send(state.thetas[0])}

    def receive(self, state: GossipState, incoming: Payload, phase: int, ctx: Context) -> GossipState:
        gossip, grads = state.gossip, state.grads
        assert gossip is not None
        if self.exchange is not None:
            return self._compressed_step(state, incoming["model"], ctx)
        theirs, heard = gossip.received(incoming["model"]), gossip.heard(incoming["model"])
        theta = state.thetas[0]
        if grads is None:  # local-epochs mode: the coupling step alone, at its own step
            pull = self._coupling(gossip, theta, theirs, heard)
            own_step = self.coupling.steps(state, state.thetas)
            state.thetas = coupled_step(state.thetas, None, [pull], self.alpha, self.lam, own_step)
            return state
        for step in range(self.local_steps):
            if step > 0:
                grads = gradient(ctx, theta, state)
            theta = theta - self.alpha * (grads + self.lam * self._coupling(gossip, theta, theirs, heard))
        state.thetas = [theta]
        return state

    def _compressed_step(
        self, state: GossipState, incoming: EdgeTensor | ServerTensor, ctx: Context
    ) -> GossipState:
        """The coupling on the exchange's differences (:mod:`.compressed`, :mod:`.powergossip`),
        scaled by the consensus step, once a round; further local steps are plain SGD."""
        gossip, exchange = state.gossip, self.exchange
        assert gossip is not None and exchange is not None and isinstance(incoming, EdgeTensor)
        diff = exchange.differences(state, exchange.receive(state, incoming))
        pull = gossip.neighbour_sum(diff if self.a_half is None else self.a_half * diff)
        theta, lam = state.thetas[0], self.lam * self.gamma
        if state.grads is None:  # local-epochs mode: the coupling step alone, at its own step
            own_step = self.coupling.steps(state, state.thetas)
            state.thetas = coupled_step(state.thetas, None, [pull], self.alpha, lam, own_step)
            return state
        theta = theta - self.alpha * (state.grads + lam * pull)
        state.thetas = [sgd_steps(ctx, state, theta, self.local_steps - 1, self.alpha)]
        return state

    def analytic_bits(self, state: GossipState, rounds: int) -> int:
        """Bits of ``rounds`` rounds' messages by the formula (:func:`.compressed.analytic_bits`)."""
        return analytic_bits(self.exchange, state, rounds)

    def penalty(self, state: GossipState, ctx: Context) -> tuple[float, float]:
        assert state.gossip is not None
        diff = state.gossip.half_edge_differences(state.thetas[0], ctx.comm)
        if self.a_half is not None:  # a_ij ||theta_i - theta_j||^2
            diff = self.a_half.sqrt() * diff
        local = (diff.double() ** 2).sum()
        e = 0.5 * float(ctx.comm.all_sum(local))  # each edge once from each end
        return 0.5 * self.lam * e, e

    def diagnose(self, state: GossipState, ctx: Context) -> list[str]:
        notes, self.notes = self.notes, []
        return notes
