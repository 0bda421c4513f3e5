"""D-PSGD: Lian et al., "Can Decentralized Algorithms Outperform Centralized Algorithms?" (2017).

Mixing matrix: Metropolis-Hastings weights ``w_ij = 1 / (1 + max(deg_i, deg_j))`` on edges,
``w_ii = 1 - sum_j w_ij`` (symmetric, doubly stochastic). On a complete graph every ``w_ij = 1/N``.
Round (``dpsgd_order``), after ``local_steps - 1`` plain local SGD steps:
- ``lian`` (default, the paper's Algorithm 1): ``x_i <- sum_j w_ij x_j - alpha g_i(x_i)``, the
  gradient taken at the pre-mixing point; clients send ``x_i``.
- ``atc`` (adapt then combine): ``x_i <- sum_j w_ij (x_j - alpha g_j(x_j))``; clients send the
  stepped model. On a complete graph with equal sample counts this is FedAvg, round for round.
With ``local_epochs = E > 0`` a round is ``E`` passes of mini-batch SGD on each client's data, then
the mixing ``x_i <- sum_j w_ij x_j`` (local SGD with gossip averaging).
Every client sends its whole model (``d`` floats) to each neighbour. There is no coupling term
(consensus is sought through mixing): ``penalty`` is ``None``. ``thetas``: the local models ``x_i``.
Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages): a client renormalises
its mixing weights over itself and the neighbours heard, ``x_i <- (w_ii x_i + sum_{j heard} w_ij
x_j) / (w_ii + sum_{j heard} w_ij)``. A client that sits a round out sends nothing, receives nothing
and keeps its model (the runtime puts it back).
Edge weights ``a_ij`` of a weighted graph are ignored (the mixing weights come from the degrees), with
a warning.

With a ``compressor`` the round is CHOCO-SGD's (Koloskova et al. 2019, Algorithm 2) whatever
``dpsgd_order``: the local step first (``x_i <- x_i - alpha g_i(x_i)``, or the local epochs), then
``x_i <- x_i - gamma sum_j w_ij (x_i - x_j)~``, ``(x_i - x_j)~`` the difference of the public copies
moved by compressed messages (:mod:`.compressed`) or PowerGossip's low-rank approximation
(:mod:`.powergossip`), ``gamma`` the ``consensus_step`` (``null``: from the compressor's quality and
``lambda_max(I - W)``). A neighbour whose message did not arrive is left out of that round's step.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import RunConfig
from ...messages import EdgeTensor, Payload, ServerTensor
from ...sheaf.graph import ClientGraph
from ...sheaf.spectrum import graph_lambda_max
from ...warn import user_stacklevel
from ..protocol.algorithm import Algorithm, Context, register
from ..training.epoch import local_epochs
from ..training.steps import gradient, sgd_steps
from .compressed import DifferenceExchange, analytic_bits, make_exchange
from .payload import GossipState, ModelGossip, gossip_init


def metropolis_weights(graph: ClientGraph) -> tuple[np.ndarray, np.ndarray]:
    """``(w per half-edge [H], w_ii per node [N])``: Metropolis-Hastings mixing weights."""
    deg = graph.degrees()
    w = 1.0 / (1.0 + np.maximum(deg[graph.src], deg[graph.dst]))
    self_w = 1.0 - np.bincount(graph.src, weights=w, minlength=graph.num_nodes)
    return w, self_w


def mixing_flops(config: RunConfig, dim: int, clients: int, half_edges: int) -> int:
    """A round's gossip average: one term per half-edge and one self term per client."""
    return 2 * dim * (half_edges + clients)


def warn_weighted(ctx: Context, name: str) -> None:
    """Warn that the graph's edge weights are ignored (the mixing weights come from the degrees)."""
    if ctx.graph.weighted:
        warnings.warn(
            f"{name} ignores the graph's edge weights a_ij: it mixes with Metropolis-Hastings weights "
            "from the degrees (dfedu uses a_ij as its coupling weights)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )


def mixing_tensors(
    gossip: ModelGossip, w: np.ndarray, self_w: np.ndarray, ref: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w per held half-edge [H, 1], w_ii per held client [N, 1])`` on ``ref``'s device and dtype,
    from :func:`metropolis_weights`'s graph-wide arrays."""
    w, self_w = gossip.on_half_edges(w), gossip.on_clients(self_w)
    return (
        torch.as_tensor(w, dtype=ref.dtype, device=ref.device)[:, None],
        torch.as_tensor(self_w, dtype=ref.dtype, device=ref.device)[:, None],
    )


def mix(
    gossip: ModelGossip,
    own: torch.Tensor,
    mixing: tuple[torch.Tensor, torch.Tensor],
    item: EdgeTensor | ServerTensor,
) -> torch.Tensor:
    """``x_i <- w_ii x_i + sum_j w_ij x_j`` (``own``: the ``x_i [N, k]``, ``item``: the neighbours'),
    renormalised over the neighbours heard when some message did not arrive (module docstring)."""
    w, self_w = mixing
    terms, heard = w * gossip.received(item), gossip.heard(item)
    if heard is None:
        return self_w * own + gossip.neighbour_sum(terms)
    # over the neighbours heard: w_ii + sum_{j heard} w_ij = 1 - sum_{j missed} w_ij
    missed = gossip.neighbour_sum(torch.where(heard, w.new_zeros(()), w))
    terms = torch.where(heard, terms, terms.new_zeros(()))
    return (self_w * own + gossip.neighbour_sum(terms)) / (1.0 - missed)


@dataclass(frozen=True)
class DPSGDKeys(Keys):
    """D-PSGD's order of the gradient step and the mixing."""

    dpsgd_order: str = key(
        "lian",
        "D-PSGD's update: `lian` (`x <- W x - alpha g(x)`) or `atc` (`x <- W (x - alpha g(x))`).",
        choices=("lian", "atc"),
    )


@register(
    "dpsgd", display="D-PSGD", reads=("compressor",), keys=(DPSGDKeys,), color=2, aggregation=mixing_flops
)
class DPSGD(Algorithm[GossipState]):
    name = "dpsgd"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.local_steps = config.local_steps
        self.order = config.dpsgd_order
        self.exchange: DifferenceExchange | None = None  # a compressor's (compressed.py); None: whole models
        self.gamma = 1.0  # the consensus step (with a compressor)

    def init(self, ctx: Context) -> GossipState:
        state = gossip_init(ctx, self.name)
        warn_weighted(ctx, self.name)
        w, self_w = metropolis_weights(ctx.graph)
        assert state.gossip is not None
        if ctx.config.compressor != "none":  # I - W: the Laplacian of the mixing weights
            mu = graph_lambda_max(ClientGraph(ctx.graph.num_nodes, ctx.graph.edges, w[0::2]))
            self.exchange = make_exchange(ctx.config, ctx, state, 1.0, mu)
            self.gamma = state.consensus_step or 1.0
        state.mixing = mixing_tensors(state.gossip, w, self_w, state.thetas[0])
        return state

    def local(self, state: GossipState, ctx: Context) -> GossipState:
        if ctx.epoch_mode:
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            state.grads, state.outgoing = None, state.thetas[0]
            return state
        theta = sgd_steps(ctx, state, state.thetas[0], self.local_steps - 1, self.alpha)
        state.thetas = [theta]
        state.grads = gradient(ctx, theta, state)
        if self.exchange is not None:  # CHOCO-SGD: the gradient step, then the compressed gossip
            state.thetas = [theta - self.alpha * state.grads]
            state.grads, state.outgoing = None, state.thetas[0]
            return state
        state.outgoing = theta - self.alpha * state.grads if self.order == "atc" else theta
        return state

    def send(self, state: GossipState, phase: int, ctx: Context) -> Payload:
        assert state.gossip is not None and state.outgoing is not None
        if self.exchange is not None:
            return {"model": self.exchange.send(state, state.outgoing)}
        return {"model": state.gossip.send(state.outgoing)}

    def receive(self, state: GossipState, incoming: Payload, phase: int, ctx: Context) -> GossipState:
        gossip, own, mixing = state.gossip, state.outgoing, state.mixing
        assert gossip is not None and own is not None and mixing is not None
        if self.exchange is not None:  # x_i <- x_i - gamma sum_j w_ij (x_i - x_j)~
            item = incoming["model"]
            assert isinstance(item, EdgeTensor)
            diff = self.exchange.differences(state, self.exchange.receive(state, item))
            state.thetas = [own - self.gamma * gossip.neighbour_sum(mixing[0] * diff)]
            return state
        mixed = mix(gossip, own, mixing, incoming["model"])
        grads = state.grads if self.order == "lian" else None  # None too after local epochs
        state.thetas = [mixed if grads is None else mixed - self.alpha * grads]
        return state

    def analytic_bits(self, state: GossipState, rounds: int) -> int:
        """Bits of ``rounds`` rounds' messages by the formula (:func:`.compressed.analytic_bits`)."""
        return analytic_bits(self.exchange, state, rounds)
