"""Budgeted links (``graph_schedule = matchings`` or ``sampled-edges``, ``link_budget``): the round's
edges against hand rules (a proper edge colouring, exactly ``k`` edges or matchings a round, the
frequency of each edge), the round against dFedU and learned maps on the round's subgraph, and
the payload bits summed over the edges that talked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.training.coupling_strength import dfedu_strength
from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.config.usage import unused_keys
from sheaf_fmtl.runtime.engine.schedule import Schedule
from sheaf_fmtl.runtime.engine.simulate import Simulation
from sheaf_fmtl.sheaf.graph import ClientGraph, make_graph
from sheaf_fmtl.sheaf.links import budget_count, edge_matchings, link_fraction, round_lambda_max
from sheaf_fmtl.sheaf.spectrum import graph_lambda_max

from .._baselines_problems import config
from .test_distributed import TINY, _compare
from .test_schedules import partners, round_subgraph, sim_on


def ring_with_chords(n: int = 8) -> ClientGraph:
    i = np.arange(n)
    ring = np.stack([i, (i + 1) % n], 1)
    chords = np.array([[k, k + n // 2] for k in range(3)])
    return ClientGraph(n, np.concatenate([ring, chords]))


@pytest.mark.parametrize("graph", [ring_with_chords(), make_graph("erdos-renyi", 20, p=0.3, seed=3)])
def test_the_matchings_are_a_proper_edge_colouring(graph: ClientGraph) -> None:
    colour = edge_matchings(graph)
    assert colour.shape == (graph.num_edges,)
    for c in np.unique(colour):
        ends = graph.edges[colour == c].ravel()
        assert len(np.unique(ends)) == len(ends)  # no client in two edges of one matching
    assert colour.max() + 1 <= 2 * graph.degrees().max() - 1  # greedy: at most 2 Delta - 1 colours


def test_one_matching_a_round_by_default_each_client_with_at_most_one_partner() -> None:
    graph = ring_with_chords()
    sched = Schedule("matchings", graph, seed=2)
    colours = edge_matchings(graph)
    seen = set()
    for r in range(1, 60):
        active = sched.active(r)
        assert active is not None
        np.testing.assert_array_equal(active, active[graph.rev])
        np.testing.assert_array_equal(active, Schedule("matchings", graph, seed=2).active(r))
        assert max(len(p) for p in partners(active, graph)) == 1
        on = active[0::2]
        assert len(np.unique(colours[on])) == 1  # exactly one matching
        seen.add(int(colours[on][0]))
    assert seen == set(range(colours.max() + 1))  # every matching gets its turn


@pytest.mark.parametrize("budget", [0.25, 0.5, 1.0])
def test_a_budget_of_matchings_talks_k_of_m_and_each_edge_in_that_fraction_of_rounds(budget: float) -> None:
    graph = make_graph("erdos-renyi", 16, p=0.4, seed=1)
    colours = edge_matchings(graph)
    m = int(colours.max()) + 1
    k = budget_count(budget, m)
    sched = Schedule("matchings", graph, seed=4, budget=budget)
    rounds = 600
    talked = np.zeros(graph.num_edges)
    for r in range(1, rounds + 1):
        on = sched.active(r)[0::2]
        assert len(np.unique(colours[on])) == k
        assert max(len(p) for p in partners(np.repeat(on, 2), graph)) <= k
        talked += on
    np.testing.assert_allclose(talked / rounds, k / m, atol=0.08)


def test_sampled_edges_talk_exactly_the_budget_uniformly() -> None:
    graph = make_graph("erdos-renyi", 20, p=0.3, seed=0)
    sched = Schedule("sampled-edges", graph, seed=7, budget=0.2)
    k = budget_count(0.2, graph.num_edges)
    assert k == round(0.2 * graph.num_edges)
    talked = np.zeros(graph.num_edges)
    rounds = 500
    for r in range(1, rounds + 1):
        active = sched.active(r)
        np.testing.assert_array_equal(active, active[graph.rev])
        assert int(active[0::2].sum()) == k
        talked += active[0::2]
    assert not np.array_equal(sched.active(1), sched.active(2))
    np.testing.assert_allclose(talked / rounds, k / graph.num_edges, atol=0.07)


def test_the_budget_is_at_least_one_and_at_most_all() -> None:
    assert budget_count(None, 7) == 1
    assert budget_count(1e-6, 7) == 1
    assert budget_count(1.0, 7) == 7
    assert budget_count(0.5, 7) == 4  # 3.5 rounds half to even
    assert budget_count(0.5, 5) == 2  # 2.5 likewise


# -- the rules: the share of edges on, and the bound of a round's Laplacian -------------------------
def test_a_round_of_k_matchings_is_bounded_by_2k_and_its_dense_spectrum_agrees() -> None:
    graph = make_graph("erdos-renyi", 16, p=0.5, seed=2)
    m = int(edge_matchings(graph).max()) + 1
    sched = Schedule("matchings", graph, seed=1, budget=2 / m)
    bound = round_lambda_max("matchings", 2 / m, graph)
    assert bound == min(graph_lambda_max(graph), 4.0)  # two matchings: at most two partners
    for r in range(1, 30):
        sub = round_subgraph(sched.active(r), graph)
        assert graph_lambda_max(sub) <= bound + 1e-9  # the dense spectrum of the round's graph
    assert link_fraction("matchings", 2 / m, graph) == 2 / m
    assert link_fraction("sampled-edges", 0.1, graph) == round(0.1 * graph.num_edges) / graph.num_edges
    assert round_lambda_max("fixed", None, graph) == graph_lambda_max(graph)
    assert link_fraction("random-peers", None, graph) == 1.0


def test_dfedus_rule_pulls_as_a_whole_round_on_average_within_the_rounds_bound() -> None:
    graph = make_graph("erdos-renyi", 12, p=0.6, seed=0)
    m = int(edge_matchings(graph).max()) + 1
    fixed, _ = dfedu_strength(config("dfedu"), graph)
    one, why = dfedu_strength(config("dfedu", graph_schedule="matchings"), graph)
    alpha = config("dfedu").alpha
    assert fixed == pytest.approx(min(0.1, 1 / (alpha * graph_lambda_max(graph))), rel=1e-3)
    assert one == pytest.approx(min(0.1 * m, 1 / (alpha * 2.0)), rel=1e-3)  # pull / b, 1/(alpha 2)
    assert "b = " in why and "pull/b" in why


# -- rounds against oracles ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "keys"),
    [
        ("dfedu", {"graph_schedule": "matchings", "link_budget": 0.5}),
        ("dfedu", {"graph_schedule": "sampled-edges", "link_budget": 0.3}),
        ("sheaf-fmtl", {"maps": "learned", "graph_schedule": "matchings"}),
    ],
)
def test_a_budgeted_round_is_the_algorithm_on_the_rounds_subgraph(algorithm: str, keys: dict) -> None:
    full = ring_with_chords(6)
    map_keys = {k: v for k, v in keys.items() if k == "maps"}
    sim = sim_on(algorithm, full, **keys)
    bits = 0
    for r in (1, 2, 3):
        active = sim.transport.faults.schedule.active(r)
        ref = sim_on(algorithm, round_subgraph(active, full), **map_keys)
        ref.state.thetas = [t.clone() for t in sim.state.thetas]
        if algorithm == "sheaf-fmtl":  # the round's edges' maps, as the full run holds them
            assert ref.state.maps is not None and sim.state.maps is not None
            ref.state.maps = _maps_on(sim, active)
        before = sim.transport.bits
        sim.step()
        ref.step()
        torch.testing.assert_close(sim.state.thetas[0], ref.state.thetas[0], rtol=1e-5, atol=1e-6)
        assert sim.transport.bits - before == ref.transport.bits  # only the edges that talked send
        bits = sim.transport.bits
    assert bits > 0
    assert sim.transport.faults.counts()["dropped_messages"] == 0


def _maps_on(sim: Simulation, active: np.ndarray) -> list[torch.Tensor]:
    """The full run's maps at the round's half-edges (one bucket: one model size; the subgraph's
    half-edges are the active ones in the same order)."""
    (maps,) = sim.state.maps
    return [maps.index_select(0, torch.as_tensor(np.flatnonzero(active))).clone()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "keys",
    [
        {"algorithm": "dfedu", "lam": 0.1, "graph_schedule": "matchings", "link_budget": 0.5},
        {"algorithm": "sheaf-fmtl", "maps": "redrawn", "graph_schedule": "sampled-edges", "link_budget": 0.3},
    ],
)
def test_two_processes_match_one_with_a_link_budget(tmp_path: Path, keys: dict[str, object]) -> None:
    _compare(tmp_path, {**TINY, "dataset": "synthetic", "rounds": 5, **keys}, 2)


# -- refusals and warnings -------------------------------------------------------------------------
def test_sampled_edges_without_a_budget_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="link_budget") as err:
        config("dfedu", graph_schedule="sampled-edges")
    assert "\n" not in str(err.value) and "link_budget=0.25" in str(err.value)
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="link_budget"):
            config("dfedu", graph_schedule="matchings", link_budget=bad)


def test_a_link_budget_without_a_budgeted_schedule_is_reported_unused() -> None:
    assert "link_budget" in unused_keys(config("dfedu", link_budget=0.5))
    assert "link_budget" not in unused_keys(config("dfedu", graph_schedule="matchings", link_budget=0.5))
    assert "peers" in unused_keys(config("dfedu", peers=3))


def test_per_edge_maps_are_allowed_with_budgeted_links() -> None:
    config("sheaf-fmtl", maps="learned", graph_schedule="matchings")
    config("sheaf-fmtl", maps="fixed", graph_schedule="sampled-edges", link_budget=0.5)
    with pytest.raises(ConfigError, match="powergossip"):
        config("dfedu", compressor="powergossip", graph_schedule="matchings")


def test_summary_records_the_schedule_and_the_share_of_edges_that_ran(tmp_path: Path) -> None:
    import sheaf_fmtl

    keys = {"dataset": "synthetic", "clients": 6, "rounds": 2, "progress": False}
    budgeted = sheaf_fmtl.run(
        **keys, algorithm="dfedu", graph_schedule="matchings", link_budget=0.5, out=tmp_path / "b"
    )
    summary = budgeted.summary
    assert summary["graph_schedule"] == "matchings" and summary["link_budget"] == 0.5
    assert 0 < summary["link_fraction"] <= 1
    assert "graph_schedule" not in sheaf_fmtl.run(**keys, algorithm="dfedu", out=tmp_path / "f").summary
