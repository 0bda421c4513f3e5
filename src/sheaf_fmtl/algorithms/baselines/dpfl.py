"""DPFL: Kharrat, Canini and Horvath, "Decentralized Personalized Federated Learning" (AISTATS 2025),
over the run's client graph: each client chooses, among its graph neighbours, the collaborators whose
models it averages with, greedily by its own held-out loss.

Every client sets aside ``dpfl_holdout`` of its training samples (a draw from the seed and its id),
never trained on: its validation set. A round is local training (``local_steps`` steps or
``local_epochs`` passes); on exchange rounds (round ``t >= 2`` with ``t % dpfl_period == 0``, the
authors' schedule: two rounds of local training first, then every ``dpfl_period``, their default 2)
every client sends its model to each neighbour (``d`` floats a half-edge) and then, with the models
it received,
- chooses greedily (the authors' ``non_monotone_constrained_greedy``): from ``S_i = {i}``, add the
  candidate ``j`` whose inclusion in the sample-weighted average ``sum_{k in S_i} n_k theta_k /
  sum_{k in S_i} n_k`` lowers the held-out loss most, while one strictly lowers it, at most
  ``dpfl_budget`` collaborators (their cardinality 10 counts the client: our default 9). So the chosen
  average is never worse than the client's own model on its held-out samples. Candidates: every
  neighbour at the first exchange, then the collaborators chosen then (their ``greedy_set``);
- takes that average as its model (directed: each client mixes with its own set).
Between exchange rounds nothing is sent. The authors' code defaults to a randomised double greedy
(``optimized_rgl_p``); the deterministic greedy above is the paper's constrained greedy. Every
candidate average of every client is evaluated at once, in chunks (``O(dpfl_budget)`` steps a round,
no loop over clients). Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages) are
not candidates that round. ``thetas``: the personalised models.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import RunConfig
from ...federation import Cohort, Cohorts
from ...federation.ragged import Ragged
from ...messages import Payload
from ..gossip.payload import GossipState, gossip_init
from ..protocol.algorithm import Algorithm, Context, register
from ..training.epoch import local_epochs
from ..training.optim import local_steps
from .pfedgraph import saved_weights

#: Held-out samples evaluated at once by :func:`holdout_losses` (rows times each row's samples).
CHUNK_SAMPLES = 1 << 16
#: The first exchange round (the authors' ``t >= 2``).
FIRST_EXCHANGE = 2
#: Seed stream of the held-out draws.
HOLDOUT_STREAM = 11


@dataclass(frozen=True, eq=False)
class Holdout:
    """A cohort's held-out samples: ``x [C, h_max, ...]``, ``y [C, h_max]``, ``n [C]``."""

    x: torch.Tensor
    y: torch.Tensor
    n: torch.Tensor


def holdout_counts(n: np.ndarray, fraction: float) -> np.ndarray:
    """Held-out samples per client: ``floor(fraction n_i)``, at least 1 and at most ``n_i - 1``
    (none for a client with fewer than two samples)."""
    n = np.asarray(n, dtype=np.int64)
    h = np.maximum(1, np.floor(fraction * n).astype(np.int64))
    return np.where(n >= 2, np.minimum(h, n - 1), 0)


def split_holdout(fed: Cohorts, fraction: float, seed: int) -> tuple[Cohorts, list[Holdout]]:
    """The federation without each client's held-out samples (a view; the data is gathered once)
    and the held-out samples per cohort, drawn per client from ``(seed, client id)``."""
    view, cohorts, held = copy.copy(fed), [], []
    for c in fed.cohorts:
        n = c.n_host.numpy()
        h = holdout_counts(n, fraction)
        order = [
            np.random.default_rng([seed, HOLDOUT_STREAM, int(i)]).permutation(k)
            for i, k in zip(c.clients, n, strict=True)
        ]
        keep = _padded([o[k:] for o, k in zip(order, h, strict=True)])
        out = _padded([o[:k] for o, k in zip(order, h, strict=True)])
        kept = torch.as_tensor(keep, device=c.device)
        x, y = c.train_rows(kept)
        cohorts.append(c.with_train(Ragged.from_padded(x, y, torch.as_tensor(n - h, device=c.device))))
        x_out, y_out = c.train_rows(torch.as_tensor(out, device=c.device))
        held.append(Holdout(x_out, y_out, torch.as_tensor(h, device=c.device)))
    view.cohorts = cohorts
    view.train_sizes = np.asarray(train_sizes_of(fed), dtype=np.int64) - holdout_counts(
        train_sizes_of(fed), fraction
    )
    view._largest = -1
    return view, held


def train_sizes_of(fed: Cohorts) -> np.ndarray:
    """``n_i`` of every client, also those held elsewhere."""
    if fed.train_sizes is not None:
        return np.asarray(fed.train_sizes, dtype=np.int64)
    return np.array([len(c.y_train) for c in fed.dataset.clients], dtype=np.int64)


def _padded(parts: list[np.ndarray]) -> np.ndarray:
    """Index rows of different lengths padded with 0 to one ``[C, max(1, longest)]`` array."""
    out = np.zeros((len(parts), max([1, *(len(p) for p in parts)])), np.int64)
    for k, p in enumerate(parts):
        out[k, : len(p)] = p
    return out


def holdout_losses(model: Cohort, held: Holdout, rows: torch.Tensor, clients: torch.Tensor) -> torch.Tensor:
    """``[R]``: the mean loss (data term) of each model ``rows[r]`` on the held-out samples of the
    cohort's client at position ``clients[r]`` (0 where it has none), in chunks of
    :data:`CHUNK_SAMPLES` samples."""
    h = held.x.shape[1]
    step = max(1, CHUNK_SAMPLES // h)
    out = []
    for s in range(0, len(rows), step):
        part, who = rows[s : s + step], clients[s : s + step]
        valid = (torch.arange(h, device=part.device) < held.n.index_select(0, who)[:, None]).to(part.dtype)
        pred = model._predict(part, held.x.index_select(0, who))
        per = model._per_sample(pred.reshape(-1, *pred.shape[2:]), held.y.index_select(0, who).reshape(-1))
        out.append((per.view(len(part), h) * valid).sum(1) / valid.sum(1).clamp(min=1))
    return torch.cat(out) if out else rows.new_zeros(0)


def greedy_choice(
    losses: Any,  # noqa: ANN401 - (models [R, d], clients [R]) -> [R]
    own: torch.Tensor,
    theirs: torch.Tensor,
    src: torch.Tensor,
    sizes: tuple[torch.Tensor, torch.Tensor],
    candidates: torch.Tensor,
    budget: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(chosen [H] bool, the chosen averages [N, d])``: every client's greedy choice among its
    ``candidates`` (half-edges ``i -> j``, ``i = src[q]``, neighbour model ``theirs[q]``), by the
    losses ``losses(models, clients)`` of averages weighted by ``sizes = (n_i [N], n_j [H])``; a
    candidate joins only when it strictly lowers the loss (module docstring)."""
    n_self, n_half = (s.to(own.dtype) for s in sizes)
    h = len(src)
    num, den = n_self[:, None] * own, n_self.clone()
    current = losses(own, torch.arange(len(own), device=own.device))
    chosen = torch.zeros(h, dtype=torch.bool, device=own.device)
    positions = torch.arange(h, device=own.device)
    for _ in range(budget if h else 0):
        trial = (num.index_select(0, src) + n_half[:, None] * theirs) / (den.index_select(0, src) + n_half)[
            :, None
        ]
        f = losses(trial, src)
        open_ = candidates & ~chosen
        f = torch.where(open_, f, torch.full_like(f, torch.inf))
        best = torch.full_like(current, torch.inf).scatter_reduce_(0, src, f, "amin")
        better = open_ & (f == best.index_select(0, src)) & (f < current.index_select(0, src))
        pick = torch.full_like(current, h, dtype=torch.long).scatter_reduce_(
            0, src, torch.where(better, positions, h), "amin"
        )
        taken = pick.index_select(0, src) == positions
        chosen = chosen | taken
        weight = torch.where(taken, n_half, torch.zeros_like(n_half))
        num = num + torch.zeros_like(num).index_add_(0, src, weight[:, None] * theirs)
        den = den + torch.zeros_like(den).index_add_(0, src, weight)
        current = torch.where(pick < h, best, current)
    return chosen, num / den[:, None]


@dataclass
class DPFLState(GossipState):
    """``candidates [H]``: the neighbours each client may choose (every one before the first
    exchange); ``chosen [H]``: its collaborators; ``edge_weights [H]``: the weight of each in its
    average; ``rounds``: rounds started so far."""

    candidates: torch.Tensor | None = None
    chosen: torch.Tensor | None = None
    edge_weights: torch.Tensor | None = None
    rounds: int = 0
    exchanges: int = 0


def _dpfl_flops(config: RunConfig, dim: int, clients: int, half_edges: int) -> int:
    """A round's model combinations, on average: every ``dpfl_period`` rounds ``dpfl_budget`` greedy
    steps of one candidate average per half-edge (their forward passes are not counted)."""
    return int(3 * dim * half_edges * config.dpfl_budget // config.dpfl_period)


def exchange_round(t: int, every: int) -> bool:
    """Whether round ``t`` (0-based) exchanges, chooses and averages."""
    return t >= FIRST_EXCHANGE and t % every == 0


@dataclass(frozen=True)
class DPFLKeys(Keys):
    """DPFL's choice of collaborators."""

    dpfl_budget: int = key(
        9,
        "DPFL: most collaborators (graph neighbours) a client chooses besides itself (the authors' "
        "cardinality 10 counts the client); it stops earlier when no neighbour lowers its held-out loss.",
        rule="dpfl_budget >= 1",
    )
    dpfl_period: int = key(
        2,
        "DPFL: rounds between two exchanges (each one chooses the collaborators again and averages with "
        "them); the first comes after two rounds of local training, as in the authors' code.",
        rule="dpfl_period >= 1",
    )
    dpfl_holdout: float = key(
        0.2,
        "DPFL: fraction of each client's training samples held out of training to choose its "
        "collaborators on (their validation loss).",
        rule="0 < dpfl_holdout < 1",
    )


@register(
    "dpfl",
    display="DPFL",
    keys=(DPFLKeys,),
    aggregation=_dpfl_flops,
)
class DPFL(Algorithm[DPFLState]):
    name = "dpfl"

    def __init__(self, config: RunConfig) -> None:
        self.alpha, self.budget = config.alpha, config.dpfl_budget
        self.every, self.fraction = config.dpfl_period, config.dpfl_holdout
        self.held: list[Holdout] = []
        self.sizes: tuple[torch.Tensor, torch.Tensor] | None = None  # (n_i [N], n_j [H]), after the holdout

    def init(self, ctx: Context) -> DPFLState:
        ctx.fed, self.held = split_holdout(ctx.fed, self.fraction, ctx.config.seed)
        base = gossip_init(ctx, self.name)
        gossip = base.gossip
        assert gossip is not None
        theta = base.thetas[0]
        n = np.asarray(ctx.fed.train_sizes, dtype=np.float64)
        own = torch.as_tensor(gossip.on_clients(n), dtype=theta.dtype, device=theta.device)
        half = torch.as_tensor(n[ctx.graph.dst[gossip.half_edges]], dtype=theta.dtype, device=theta.device)
        self.sizes = (own, half)
        every = torch.ones(len(gossip.half_edges), dtype=torch.bool, device=theta.device)
        return DPFLState(thetas=base.thetas, gossip=gossip, candidates=every, chosen=~every)

    def local(self, state: DPFLState, ctx: Context) -> DPFLState:
        if ctx.epoch_mode:
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
        else:
            state.thetas = [local_steps(ctx, state, state.thetas[0], ctx.local_steps(), self.alpha)]
        state.rounds += 1
        return state

    def phases(self, state: DPFLState) -> int:
        return 1 if exchange_round(state.rounds - 1, self.every) else 0

    def send(self, state: DPFLState, phase: int, ctx: Context) -> Payload:
        assert state.gossip is not None
        return {"model": state.gossip.send(state.thetas[0])}

    def receive(self, state: DPFLState, incoming: Payload, phase: int, ctx: Context) -> DPFLState:
        gossip, candidates = state.gossip, state.candidates
        assert gossip is not None and candidates is not None and self.sizes is not None
        theirs, heard = gossip.received(incoming["model"]), gossip.heard(incoming["model"])
        open_ = candidates if heard is None else candidates & heard.view(-1)
        model, held = ctx.fed.cohorts[0], self.held[0]
        chosen, mixed = greedy_choice(
            lambda rows, who: holdout_losses(model, held, rows, who),
            state.thetas[0],
            theirs,
            gossip.src,
            self.sizes,
            open_,
            self.budget,
        )
        if state.exchanges == 0:  # the authors' greedy_set: later choices among the first collaborators
            state.candidates = chosen
        state.exchanges += 1
        n_self, n_half = self.sizes
        total = n_self + gossip.neighbour_sum(torch.where(chosen, n_half, 0.0)[:, None])[:, 0]
        state.chosen, state.thetas = chosen, [mixed]
        state.edge_weights = torch.where(chosen, n_half / total.index_select(0, gossip.src), 0.0)
        return state

    def checkpoint(self, state: DPFLState, ctx: Context) -> dict[str, Any]:
        """``edge_weights [2E]``: the weight ``n_j / sum_{k in S_i} n_k`` client ``i`` gave each chosen
        collaborator ``j`` at the last exchange, per graph half-edge ``i -> j`` (0: not chosen; zero on
        half-edges held elsewhere, and everywhere before the first exchange)."""
        return {"edge_weights": saved_weights(state.gossip, state.edge_weights, ctx.graph)}
