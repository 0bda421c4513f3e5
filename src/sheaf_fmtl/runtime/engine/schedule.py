"""Graphs that change every round (``graph_schedule``) and clients that join late (``join_round``).

The run's graph (:func:`schedule_graph`) holds every edge a round may use: the base graph
(``peers_from = graph``), the complete graph (``random-peers`` with ``peers_from = all``), or the
union of the exponential graph's hops (``exponential``). :class:`Schedule` says, per round, which of
its edges are active and which clients are present; :class:`~.faults.Faults` treats an inactive edge
or an absent client as the drop plan treats a dropped one (nothing sent, no bits, the neighbours'
missing-neighbour rule), except that it counts neither as a dropped message. Faults apply on top.

- ``random-peers``: in round ``t`` each client ``i`` picks ``min(peers, deg_i)`` of its candidate
  neighbours uniformly at random (the ones with the smallest draws ``U(seed, t, half-edge i -> j)``),
  and an undirected edge is active when either end picked it (Epidemic Learning's push model, as an
  undirected coupling): each client couples with its ``peers`` picks and with whoever picked it,
  about ``2 peers`` partners on average (fewer where picks coincide).
- ``exponential``: one-peer exponential graph (Ying et al., 2021): in round ``t`` (from 1) the
  hop is ``2^((t - 1) mod m)``, ``m = ceil(log2 N)``, and the edge ``{i, i + hop mod N}`` is active for
  every ``i``: as an undirected coupling each client has two partners (one at ``hop = N / 2``).
- ``matchings`` (budgeted links): the graph's edges split once into matchings (a greedy colouring of
  its line graph, NetworkX's ``largest_first``: no client is in two edges of one matching), and in
  round ``t`` the ``k = max(1, round(link_budget M))`` matchings of the ``M`` with the smallest draws
  ``U(seed, t, matching)`` talk (one matching a round when ``link_budget`` is null): each client
  talks to at most ``k`` partners, and each edge talks in a fraction ``k / M`` of the rounds.
- ``sampled-edges`` (budgeted links): in round ``t`` the ``k = max(1, round(link_budget E))`` edges
  of the graph with the smallest draws ``U(seed, t, edge)`` talk.
- ``join_round = R`` for client ``i``: it is absent in rounds ``t < R`` (it sends nothing, trains
  nothing and keeps its initial state) and takes part from round ``R`` on (``0`` and ``1``: from the
  start). Its metrics are reported from the evaluation after round ``R``.

Every draw derives from ``(seed, round, id)`` alone, so every process draws the same rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...config import ConfigError
from ...config.errors import shown
from ...config.values import MAX_JOIN_ROUND, join_round_values
from ...sheaf.graph import ClientGraph, make_graph
from ...sheaf.links import BUDGETED, budget_count, edge_matchings
from ...spelling import setting
from ...streams import uniforms

if TYPE_CHECKING:
    from ...config import RunConfig

PEER_DRAW, JOIN_DRAW, LINK_DRAW = 13, 14, 15  # stream kinds (sheaf_fmtl.streams; 11, 12: the drop plan's)


def exponential_hops(num_nodes: int) -> list[int]:
    """The hops ``2^k``, ``k = 0..ceil(log2 N) - 1``, of the one-peer exponential graph."""
    return [2**k for k in range(max(1, math.ceil(math.log2(num_nodes))))]


def exponential_graph(num_nodes: int) -> ClientGraph:
    """Every edge ``{i, i + 2^k mod N}`` the exponential schedule uses, as one graph."""
    i = np.arange(num_nodes)
    pairs = np.concatenate([np.stack([i, (i + h) % num_nodes], 1) for h in exponential_hops(num_nodes)])
    pairs = np.unique(np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1), axis=0)
    return ClientGraph(num_nodes, pairs)


def join_rounds(spec: str, num_clients: int, seed: int) -> np.ndarray | None:
    """``[N]`` each client's first round from ``join_round`` (``None``: all from the start).

    ``spec``: ``""``; a comma-separated list, one round per client; or ``late:K@R``: ``K`` clients,
    chosen from ``seed``, join at round ``R``."""
    try:
        read = join_round_values(spec)
        if read is None:
            return None
        if isinstance(read, tuple):
            count, first = read
            if count > num_clients:
                raise ValueError
            chosen = np.random.default_rng([seed, JOIN_DRAW]).permutation(num_clients)[:count]
            rounds = np.zeros(num_clients, np.int64)
            rounds[chosen] = first
            return rounds
        rounds = np.array(read, np.int64)
    except ValueError:
        rounds = np.array([-1])
    if len(rounds) != num_clients or (rounds < 0).any():
        raise ConfigError(
            f"config key 'join_round' = {shown(spec)} is not allowed; allowed: one round >= 0 per client "
            f"({num_clients} of them, comma-separated) or late:K@R (K <= {num_clients} clients join at "
            f"round R <= {MAX_JOIN_ROUND}), e.g. {setting('join_round', 'late:2@50')}"
        )
    return rounds


@dataclass
class Schedule:
    """Which edges of the run's graph are active and which clients are present, round by round."""

    kind: str
    graph: ClientGraph
    seed: int = 0
    peers: int = 1
    joins: np.ndarray | None = None  # [N] first round of each client; None: all from the start
    budget: float | None = None  # link_budget: the fraction of matchings or edges a round talks

    @classmethod
    def from_config(cls, config: RunConfig, graph: ClientGraph) -> Schedule | None:
        """The config's schedule on the run's graph (``None``: a fixed graph, everyone from the start)."""
        joins = join_rounds(config.join_round, graph.num_nodes, config.seed)
        if config.graph_schedule == "fixed" and joins is None:
            return None
        return cls(config.graph_schedule, graph, config.seed, config.peers, joins, config.link_budget)

    def active(self, round_: int) -> np.ndarray | None:
        """``[2E]`` bool: the half-edges of round ``round_``'s graph (``None``: all of them)."""
        g = self.graph
        if self.kind == "random-peers":
            u = uniforms(self.seed, PEER_DRAW, round_, np.arange(g.num_half_edges))
            order = np.lexsort((u, g.src))  # each client's half-edges, smallest draw first
            first = np.searchsorted(g.src[order], g.src[order], side="left")
            picked = np.zeros(g.num_half_edges, bool)
            picked[order[np.arange(len(order)) - first < self.peers]] = True
            active: np.ndarray = picked | picked[g.rev]
            return active
        if self.kind == "exponential":
            hops = exponential_hops(g.num_nodes)
            hop = hops[(round_ - 1) % len(hops)]
            gap = (g.dst - g.src) % g.num_nodes
            on: np.ndarray = (gap == hop) | (gap == g.num_nodes - hop)
            return on
        if self.kind in BUDGETED:
            return np.repeat(self._talking(round_), 2)  # half-edges 2e, 2e + 1: edge e
        return None

    def _talking(self, round_: int) -> np.ndarray:
        """``[E]`` bool: the edges a budgeted schedule lets talk in round ``round_``."""
        g = self.graph
        if self.kind == "sampled-edges":
            u = uniforms(self.seed, LINK_DRAW, round_, np.arange(g.num_edges))
            on = np.zeros(g.num_edges, bool)
            on[np.argsort(u, kind="stable")[: budget_count(self.budget, g.num_edges)]] = True
            return on
        colours = edge_matchings(g)
        count = int(colours.max()) + 1 if g.num_edges else 1
        u = uniforms(self.seed, LINK_DRAW, round_, np.arange(count))
        chosen = np.argsort(u, kind="stable")[: budget_count(self.budget, count)]
        talking: np.ndarray = np.isin(colours, chosen)
        return talking

    def absent(self, round_: int) -> np.ndarray | None:
        """``[N]`` bool: the clients that have not joined by round ``round_`` (``None``: none)."""
        if self.joins is None:
            return None
        out = self.joins > round_
        return out if out.any() else None

    def present(self, round_: int) -> np.ndarray | None:
        """``[N]`` bool: whose metrics an evaluation after round ``round_`` reports (``None``: all)."""
        return reported(self.joins, round_)


def reported(joins: np.ndarray | None, round_: int) -> np.ndarray | None:
    """``[N]`` bool: the clients of first rounds ``joins`` (:func:`join_rounds`) whose metrics an
    evaluation after round ``round_`` reports (``None``: all of them)."""
    if joins is None:
        return None
    out: np.ndarray = (joins <= round_) | (joins <= 1)
    return out


def schedule_graph(config: RunConfig, num_clients: int, edge_bytes: float = 0.0) -> ClientGraph:
    """Every edge a round may use when the schedule draws among every client: the union of the
    exponential graph's hops, or the complete graph (``random-peers`` with ``peers_from = all``;
    ``edge_bytes``: what the run holds per edge, checked before it is built)."""
    if config.graph_schedule == "exponential":
        return exponential_graph(num_clients)
    return make_graph("complete", num_clients, edge_bytes=edge_bytes)
