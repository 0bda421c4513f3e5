"""Budgeted links: which share of a graph's edges talks a round, and what bounds a round's Laplacian.

A budgeted schedule (``graph_schedule = matchings`` or ``sampled-edges``, key ``link_budget``; the
draws are ``runtime/engine/schedule.py``'s) lets ``k`` of the graph's ``M`` matchings (a greedy edge
colouring, :func:`edge_matchings`) or ``k`` of its ``E`` edges talk each round. Two numbers follow
from the graph and the budget alone, so every process and the start-up rules agree on them:

- the *link fraction* ``b`` (:func:`link_fraction`): the expected share of the edges on in a round,
  ``k / M`` or ``k / E``; a round's expected Laplacian is ``b L``, so a coupling at strength
  ``lam / b`` pulls, on average, as a round of the whole graph at ``lam``;
- a bound on every round's ``lambda_max`` (:func:`round_lambda_max`): a client has at most ``k``
  partners in a round of ``k`` matchings (and at most ``min(k, its degree)`` among ``k`` sampled
  edges), and ``lambda_max(L_t) <= 2 max_i sum_j a_ij`` (Anderson and Morley, 1985), so
  ``lambda_max(L_t) <= min(lambda_max(L), 2 a_max k_deg)``: one matching a round bounds it by
  ``2 a_max`` whatever the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..component_keys import Keys, declare_keys, key
from .graph import ClientGraph
from .spectrum import graph_lambda_max

#: The schedules that spend a budget of links a round (``link_budget``).
BUDGETED = ("matchings", "sampled-edges")


def edge_matchings(graph: ClientGraph) -> np.ndarray:
    """``[E]`` the matching (colour ``0..M-1``) of each edge: a greedy colouring of the line graph
    (NetworkX ``greedy_color``, ``largest_first``), so two edges of one colour share no client;
    kept in the graph's cache (one colouring per graph)."""
    key = "edge matchings"
    if key in graph.cache:
        return np.asarray(graph.cache[key])
    colour = np.zeros(graph.num_edges, np.int64)
    if graph.num_edges:
        line = nx.line_graph(nx.Graph([tuple(e) for e in graph.edges.tolist()]))
        index = {tuple(e): k for k, e in enumerate(graph.edges.tolist())}
        for (i, j), c in nx.coloring.greedy_color(line, strategy="largest_first").items():
            colour[index[(min(i, j), max(i, j))]] = c
    graph.cache[key] = colour
    return colour


def budget_count(budget: float | None, total: int) -> int:
    """How many of ``total`` matchings or edges talk a round: ``max(1, round(budget total))``, at
    most ``total`` (``None``: one)."""
    return 1 if budget is None else min(total, max(1, round(budget * total)))


def _pool(kind: str, graph: ClientGraph) -> int:
    """The number of matchings (``matchings``) or edges (``sampled-edges``) a budget draws from."""
    if kind == "matchings":
        return int(edge_matchings(graph).max()) + 1 if graph.num_edges else 1
    return max(1, graph.num_edges)


def link_fraction(kind: str, budget: float | None, graph: ClientGraph) -> float:
    """``b``: the expected share of ``graph``'s edges on in a round of ``kind`` (1: every edge)."""
    if kind not in BUDGETED or graph.num_edges == 0:
        return 1.0
    pool = _pool(kind, graph)
    return budget_count(budget, pool) / pool


def round_lambda_max(kind: str, budget: float | None, graph: ClientGraph) -> float:
    """A bound on ``lambda_max`` of every round's Laplacian under schedule ``kind`` (module
    docstring); the graph's own ``lambda_max`` for any other schedule."""
    full = graph_lambda_max(graph)
    if kind not in BUDGETED or graph.num_edges == 0:
        return full
    k = budget_count(budget, _pool(kind, graph))
    partners = k if kind == "matchings" else min(k, int(graph.degrees().max()))
    a_max = float(np.max(graph.half_edge_weights()))
    return min(full, 2.0 * a_max * partners)


@declare_keys("graph schedule", selector="graph_schedule")
@dataclass(frozen=True)
class LinkScheduleKeys(Keys):
    """The graph schedules' own keys (``graph_schedule`` picks one)."""

    link_budget: float | None = key(
        None,
        "`graph_schedule=matchings` or `sampled-edges`: the fraction of the graph's matchings (or edges) "
        "that talk each round, at least one (null: one matching a round; `sampled-edges` needs a value).",
        rule="0 < link_budget <= 1 (null: one matching a round)",
        readers=BUDGETED,
    )
    peers: int = key(
        2,
        "`graph_schedule=random-peers`: partners each client picks each round.",
        rule="peers >= 1",
        readers=("random-peers",),
    )
    peers_from: str = key(
        "graph",
        "`graph_schedule=random-peers`: pick the partners among the `graph`'s neighbours (`graph`; the "
        "only choice with `maps=learned` or `fixed`) or among every client (`all`: the complete graph).",
        choices=("graph", "all"),
        readers=("random-peers",),
    )
