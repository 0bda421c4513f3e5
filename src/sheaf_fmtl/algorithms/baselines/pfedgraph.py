"""pFedGraph: Ye et al., "Personalized Federated Learning with Inferred Collaboration Graphs" (ICML
2023), in a decentralized form: each client learns its row of the collaboration graph over itself
and its graph neighbours (the authors' server learns every row over all clients).

Round, client ``i`` (``local_steps`` steps or ``local_epochs`` passes, as the other baselines):
1. local training of ``f_i(theta) + lam (1 - <c_i, theta> / ||theta||)`` from its personalised model,
   ``c_i = sum_j w_ij theta_j / ||theta_j||`` the last round's aggregate of unit models (none in the
   first round). This is the paper's eq. (1) with the cosine distance ``1 - cos`` (the weights sum to
   1); the authors' released code adds ``<c_i, theta> / ||theta||`` with a positive ``lam``, a
   similarity that pushes the models apart, which we do not copy.
2. every client sends its trained model ``theta_i`` to each neighbour (``d`` floats a half-edge).
3. the graph step (their ``optimizing_graph_matrix_neighbor``): with the updates from the common
   initial model ``u_i = theta_i - theta(0)``, ``s_ij = -cos(u_i, u_j)`` (``-1`` below ``-0.9``), over
   ``J_i = {i} + neighbours`` their QP ``min_w w^T (alpha I) w + (s - 2 alpha p)^T w`` on the simplex,
   ``p_j = n_j / sum_{k in J_i} n_k`` the data-size prior. Completing the square it is
   ``min_w alpha ||w - (p - s / (2 alpha))||^2``: the Euclidean projection of ``p - s / (2 alpha)``
   onto the simplex (:func:`simplex_projection`, all clients at once; no QP solver).
4. ``theta_i <- sum_{j in J_i} w_ij theta_j`` (the personalised model, where the next round starts)
   and ``c_i`` from the same weights.
``alpha`` is the key ``pfedgraph_alpha`` (their default 0.8), ``lam`` the key ``lam`` (their default
0.01, ours for the baselines too). The sample counts ``n_j`` are the numbers every process knows of
the federation at start-up. ``thetas``: the personalised models (what is evaluated).
Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages): left out of ``J_i`` that
round. ``init = per-client`` is refused: the updates are measured from the common initial model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import ConfigError, RunConfig
from ...messages import Payload
from ...sheaf.graph import ClientGraph
from ..gossip.payload import GossipState, ModelGossip, gossip_init
from ..protocol.algorithm import Algorithm, Context, register
from ..training.optim import local_step

#: Below this, ``-cos`` counts as ``-1`` (the authors' code).
SIMILAR = -0.9


def simplex_projection(values: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``[M]``: the Euclidean projection of each group's entries of ``values [M]`` onto the
    probability simplex (``groups [M]`` in ``0..num_groups-1``; Held, Wolfe and Crowder's sort and
    threshold, every group at once, no host read)."""
    v64 = values.double()
    order = torch.sort(v64, descending=True, stable=True).indices
    order = order.index_select(0, torch.sort(groups.index_select(0, order), stable=True).indices)
    v, g = v64.index_select(0, order), groups.index_select(0, order)
    counts = v.new_zeros(num_groups).index_add_(0, g, torch.ones_like(v))
    starts = (torch.cumsum(counts, 0) - counts).long()
    rank = (torch.arange(len(v), device=v.device) - starts.index_select(0, g) + 1).to(v.dtype)
    total = torch.cumsum(v, 0)
    before = (total - v).index_select(0, starts.clamp(max=max(len(v) - 1, 0)))
    css = total - before.index_select(0, g)  # running sum within the group
    fits = v - (css - 1.0) / rank > 0
    rho = v.new_zeros(num_groups).scatter_reduce_(
        0, g, torch.where(fits, rank, torch.zeros_like(rank)), "amax"
    )
    last = (starts + rho.long() - 1).clamp(0, max(len(v) - 1, 0))
    tau = (css.index_select(0, last) - 1.0) / rho.clamp(min=1.0)
    x = (v - tau.index_select(0, g)).clamp(min=0.0)
    return torch.empty_like(x).scatter_(0, order, x).to(values.dtype)


def graph_step(
    own: torch.Tensor,
    theirs: torch.Tensor,
    src: torch.Tensor,
    origin: torch.Tensor,
    sizes: tuple[torch.Tensor, torch.Tensor],
    alpha: float,
    heard: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w per half-edge [H], w_ii [N])``: each client's row of the collaboration graph over itself
    and its neighbours (module docstring, step 3). ``own [N, d]``: the clients' models; ``theirs
    [H, d]``: the neighbour's model at each half-edge ``i -> j`` (``i = src[q]``, a row of ``own``);
    ``origin``: the initial model (``[d]`` or ``[N, d]``); ``sizes``: ``(n_i [N], n_j [H])``;
    ``heard [H]`` bool: the neighbours left in (``None``: all)."""
    n_self, n_half = sizes
    n = len(own)
    mine = own - origin
    cos_half = torch.nn.functional.cosine_similarity(mine.index_select(0, src), theirs - origin, 1)
    cos_self = torch.nn.functional.cosine_similarity(mine, mine, 1)
    s_half, s_self = -cos_half, -cos_self
    s_half = torch.where(s_half < SIMILAR, -torch.ones_like(s_half), s_half)
    s_self = torch.where(s_self < SIMILAR, -torch.ones_like(s_self), s_self)
    n_in = n_half.to(own.dtype) if heard is None else torch.where(heard, n_half.to(own.dtype), 0.0)
    total = n_self.to(own.dtype) + own.new_zeros(n).index_add_(0, src, n_in)
    v_half = n_half.to(own.dtype) / total.index_select(0, src) - s_half / (2.0 * alpha)
    v_self = n_self.to(own.dtype) / total - s_self / (2.0 * alpha)
    if heard is not None:  # below v_ii - 1 an entry is always projected to 0: left out
        v_half = torch.where(heard, v_half, v_self.index_select(0, src) - 2.0)
    groups = torch.cat([src, torch.arange(n, device=src.device)])
    w = simplex_projection(torch.cat([v_half, v_self]), groups, n)
    return w[: len(src)], w[len(src) :]


def collaboration_weights(
    graph: ClientGraph, thetas: torch.Tensor, initial: torch.Tensor, sizes: np.ndarray, alpha: float = 0.8
) -> tuple[np.ndarray, np.ndarray]:
    """``(w per graph half-edge [2E], w_ii [N])``: the collaboration graph pFedGraph's step would
    learn from the models ``thetas [N, d]`` (updates measured from ``initial``, ``[d]``), sample
    counts ``sizes [N]`` and ``alpha`` (``pfedgraph_alpha``); row ``i`` sums to 1."""
    src = torch.as_tensor(graph.src, dtype=torch.long, device=thetas.device)
    dst = torch.as_tensor(graph.dst, dtype=torch.long, device=thetas.device)
    n = torch.as_tensor(np.asarray(sizes), dtype=thetas.dtype, device=thetas.device)
    w_half, w_self = graph_step(
        thetas, thetas.index_select(0, dst), src, initial, (n, n.index_select(0, dst)), alpha
    )
    return w_half.cpu().double().numpy(), w_self.cpu().double().numpy()


def train_sizes(ctx: Context) -> np.ndarray:
    """``n_i`` of every client (also those held elsewhere): the federation's numbers."""
    fed = ctx.fed
    if fed.train_sizes is not None:
        return np.asarray(fed.train_sizes, dtype=np.float64)
    return np.array([len(c.y_train) for c in fed.dataset.clients], dtype=np.float64)


@dataclass
class PFedGraphState(GossipState):
    """``thetas``: the personalised models; ``origin [d]``: the common initial model; ``anchor [N, d]``:
    ``c_i`` (zero before the first aggregation); ``edge_weights [H]`` and ``self_weights [N]``: the
    last round's graph rows."""

    origin: torch.Tensor | None = None
    anchor: torch.Tensor | None = None
    edge_weights: torch.Tensor | None = None
    self_weights: torch.Tensor | None = None
    client_rows: ClassVar[tuple[str, ...]] = (*GossipState.client_rows, "anchor", "self_weights")


def pull_gradient(theta: torch.Tensor, anchor: torch.Tensor, lam: float) -> torch.Tensor:
    """``[N, d]``: the gradient of ``lam (1 - <c, theta> / ||theta||)``,
    ``-lam (c - <c, u> u) / ||theta||`` with ``u = theta / ||theta||``."""
    norm = theta.norm(dim=1, keepdim=True).clamp(min=torch.finfo(theta.dtype).tiny)
    u = theta / norm
    return cast("torch.Tensor", -lam * (anchor - (anchor * u).sum(1, keepdim=True) * u) / norm)


def _graph_flops(config: RunConfig, dim: int, clients: int, half_edges: int) -> int:
    """A round's combinations: the cosines (one per half-edge), the personalised model and ``c_i``
    (a term per half-edge and client each)."""
    return 2 * dim * (3 * half_edges + 2 * clients)


@dataclass(frozen=True)
class PFedGraphKeys(Keys):
    """pFedGraph's collaboration-graph step."""

    pfedgraph_alpha: float = key(
        0.8,
        "pFedGraph: weight `alpha` of the data-size prior in each client's graph step, `min_w sum_j w_j "
        "(-cos_ij) + alpha ||w - p||^2` over the simplex of itself and its neighbours (larger: closer to "
        "averaging by sample counts; smaller: to the most similar updates).",
        rule="pfedgraph_alpha > 0",
    )


@register(
    "pfedgraph",
    display="pFedGraph",
    step_keys=("alpha", "lam"),
    reads=("lam",),
    keys=(PFedGraphKeys,),
    aggregation=_graph_flops,
)
class PFedGraph(Algorithm[PFedGraphState]):
    name = "pfedgraph"

    def __init__(self, config: RunConfig) -> None:
        self.alpha, self.lam, self.graph_alpha = config.alpha, config.lam_value, config.pfedgraph_alpha
        self.sizes: tuple[torch.Tensor, torch.Tensor] | None = None  # (n_i [N], n_j [H]) of the held rows

    def init(self, ctx: Context) -> PFedGraphState:
        if ctx.config.init != "common":
            raise ConfigError(
                "algorithm=pfedgraph measures each client's update from the common initial model; "
                "set init=common"
            )
        base = gossip_init(ctx, self.name)
        gossip = base.gossip
        assert gossip is not None
        theta = base.thetas[0]
        n = train_sizes(ctx)
        own = torch.as_tensor(gossip.on_clients(n), dtype=theta.dtype, device=theta.device)
        half = torch.as_tensor(n[ctx.graph.dst[gossip.half_edges]], dtype=theta.dtype, device=theta.device)
        self.sizes = (own, half)
        return PFedGraphState(
            thetas=base.thetas,
            gossip=gossip,
            origin=ctx.fed.architecture(0).initial_model(ctx.config.seed, True).to(theta),
            anchor=torch.zeros_like(theta),
            self_weights=theta.new_ones(len(theta)),  # (a row per client from the start: faults keep rows)
        )

    def local(self, state: PFedGraphState, ctx: Context) -> PFedGraphState:
        theta, anchor = state.thetas[0], state.anchor
        assert anchor is not None
        for _ in range(ctx.local_steps()):
            grads, state.batch_loss = ctx.stochastic_gradients([theta])
            batch = ctx.last_batches[0] if ctx.last_batches else True
            pull = pull_gradient(theta, anchor, self.lam)
            if batch is None:  # no sample left this step: no step at all
                pull = torch.zeros_like(pull)
            elif not isinstance(batch, bool) and batch.active is not None:
                moved = torch.zeros(len(theta), 1, dtype=theta.dtype, device=theta.device)
                pull = pull * moved.index_fill_(0, batch.active, 1.0)
            theta = local_step(ctx, state, [theta], [grads[0] + pull], self.alpha)[0]
        state.thetas = [theta]
        return state

    def send(self, state: PFedGraphState, phase: int, ctx: Context) -> Payload:
        assert state.gossip is not None
        return {"model": state.gossip.send(state.thetas[0])}

    def receive(self, state: PFedGraphState, incoming: Payload, phase: int, ctx: Context) -> PFedGraphState:
        gossip, origin = state.gossip, state.origin
        assert gossip is not None and origin is not None and self.sizes is not None
        theirs, heard = gossip.received(incoming["model"]), gossip.heard(incoming["model"])
        own = state.thetas[0]
        flags = None if heard is None else heard.view(-1)
        w_half, w_self = graph_step(own, theirs, gossip.src, origin, self.sizes, self.graph_alpha, flags)
        state.edge_weights, state.self_weights = w_half, w_self
        tiny = torch.finfo(own.dtype).tiny
        unit_own = own / own.norm(dim=1, keepdim=True).clamp(min=tiny)
        unit_theirs = theirs / theirs.norm(dim=1, keepdim=True).clamp(min=tiny)
        w = w_half[:, None]
        state.thetas = [w_self[:, None] * own + gossip.neighbour_sum(w * theirs)]
        state.anchor = w_self[:, None] * unit_own + gossip.neighbour_sum(w * unit_theirs)
        return state

    def checkpoint(self, state: PFedGraphState, ctx: Context) -> dict[str, Any]:
        """``edge_weights [2E]``: the weight ``w_ij`` client ``i`` gave neighbour ``j`` in the last
        round, per graph half-edge ``i -> j`` (zero on half-edges held elsewhere; rows with ``w_ii``
        sum to 1)."""
        return {"edge_weights": saved_weights(state.gossip, state.edge_weights, ctx.graph)}


def saved_weights(
    gossip: ModelGossip | None, weights: torch.Tensor | None, graph: ClientGraph
) -> torch.Tensor:
    """``[2E]`` float64 per graph half-edge: ``weights [H]`` of the half-edges held here, zero elsewhere
    (zero everywhere before the first exchange)."""
    out = torch.zeros(graph.num_half_edges, dtype=torch.float64)
    if gossip is not None and weights is not None:
        out[torch.as_tensor(gossip.half_edges)] = weights.detach().cpu().double()
    return out
