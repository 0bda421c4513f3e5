"""Graphs that change every round (``graph_schedule``) and clients that join late (``join_round``),
against one-process oracles: the fixed-graph algorithm run on the round's subgraph, dense numpy
mixing, hand-computed exponential hops, and payload sizes summed over the active edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.runtime.engine.faults import DropPlan
from sheaf_fmtl.runtime.engine.schedule import Schedule, exponential_graph, join_rounds
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_graph
from sheaf_fmtl.sheaf.graph import ClientGraph

from .._baselines_problems import (
    complete_graph,
    config,
    federation,
    regression_dataset,
    restored_beside,
    simulation,
)
from .test_distributed import TINY, _compare
from .test_faults import freeze_gradients

N = 6


def sim_on(algorithm: str, graph: ClientGraph, **keys: object) -> Simulation:
    fed = federation(regression_dataset(sizes=(5, 6, 7, 8, 9, 10)))
    return simulation(algorithm, fed, graph, stability_check=False, **keys)


def partners(active: np.ndarray, graph: ClientGraph) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in range(graph.num_nodes)]
    for h in np.flatnonzero(active):
        out[int(graph.src[h])].add(int(graph.dst[h]))
    return out


def round_subgraph(active: np.ndarray, graph: ClientGraph) -> ClientGraph:
    return ClientGraph(graph.num_nodes, graph.edges[active[0::2]])  # half-edge 2e: edge e, forward


# -- the draws -------------------------------------------------------------------------------------
def test_random_peers_are_reproducible_symmetric_and_of_the_stated_degree() -> None:
    graph = complete_graph(40)
    peers = 2
    sched = Schedule("random-peers", graph, seed=5, peers=peers)
    degrees = []
    for r in range(1, 201):
        active = sched.active(r)
        assert active is not None
        np.testing.assert_array_equal(active, Schedule("random-peers", graph, seed=5, peers=peers).active(r))
        np.testing.assert_array_equal(active, active[graph.rev])  # an edge is active at both ends
        deg = np.bincount(graph.src[active], minlength=40)
        assert deg.min() >= peers  # its own picks at least
        degrees.append(deg)
    p = peers / 39  # j is picked by i, or picks i: 1 - (1 - p)^2 per pair
    assert np.mean(degrees) == pytest.approx(39 * (1 - (1 - p) ** 2), abs=0.06)
    assert not np.array_equal(sched.active(1), sched.active(2))


def test_random_peers_out_of_a_sparse_graph_use_its_edges_only() -> None:
    graph = ClientGraph(5, np.array([[0, 1], [1, 2], [2, 3], [3, 4], [0, 4], [0, 2]]))
    active = Schedule("random-peers", graph, seed=0, peers=1).active(3)
    assert active is not None
    deg = np.bincount(graph.src[active], minlength=5)
    assert (deg >= 1).all() and active.sum() <= 2 * 5  # at most one pick per client, both directions


@pytest.mark.parametrize(
    ("n", "round_", "expected"),
    [(8, 1, {1, 7}), (8, 2, {2, 6}), (8, 3, {4}), (8, 4, {1, 7}), (6, 3, {2, 4}), (6, 2, {2, 4})],
)
def test_exponential_hops_by_hand(n: int, round_: int, expected: set[int]) -> None:
    graph = exponential_graph(n)
    active = Schedule("exponential", graph).active(round_)
    assert active is not None
    got = partners(active, graph)
    assert got[0] == expected  # client 0's partners: 0 +- 2^((t - 1) mod ceil(log2 n)) mod n
    assert all(got[i] == {(j + i) % n for j in expected} for i in range(n))  # the same hop everywhere


def test_join_round_spellings() -> None:
    np.testing.assert_array_equal(join_rounds("0,0,5", 3, 0), [0, 0, 5])
    late = join_rounds("late:2@7", 6, 1)
    assert late is not None and sorted(late.tolist()) == [0, 0, 0, 0, 7, 7]
    np.testing.assert_array_equal(late, join_rounds("late:2@7", 6, 1))
    assert join_rounds("", 3, 0) is None
    for bad in ("0,1", "late:9@3", "x", "0,-1,2"):
        with pytest.raises(ConfigError, match="join_round"):
            join_rounds(bad, 3, 0)
    assert config("dfedu", join_round=[0, 3, 0]).join_round == "0,3,0"  # a list from Python


HUGE = 99999999999999999999  # past int64


@pytest.mark.parametrize(
    "bad",
    [
        f"late:2@{HUGE}",
        f"late:{HUGE}@3",
        f"0,0,{HUGE}",
        [0, 0, 2**63],
        [0, 0, 10**20],
        "late:2@-1",
        "late:2",
        "late:2@1.5",
        "0,1e30,0",
        "9" * 5000,  # more digits than int() reads
        [0, True, 0],
    ],
)
def test_a_join_round_out_of_bounds_is_refused_at_config_time_in_one_line(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"config key 'join_round' = .* is not allowed; allowed: ") as err:
        config("dfedu", join_round=bad)
    assert "\n" not in str(err.value) and "late:2@50" in str(err.value) and len(str(err.value)) < 500
    if isinstance(bad, str) and not bad.startswith("9"):  # the engine's own reading refuses it too
        with pytest.raises(ConfigError, match="join_round"):
            join_rounds(bad, 3, 0)


def test_the_largest_join_round_is_a_client_that_never_joins() -> None:
    top = 2**63 - 1
    assert config("dfedu", join_round=[0, 0, top]).join_round == f"0,0,{top}"
    rounds = join_rounds(f"late:1@{top}", 3, 0)
    assert rounds is not None and sorted(rounds.tolist()) == [0, 0, top]
    assert Schedule("fixed", complete_graph(3), joins=rounds).present(10**6).tolist().count(False) == 1


def test_random_peers_draws_from_the_runs_graph_unless_every_client_is_asked_for() -> None:
    """The default draws partners among the graph's neighbours (the graph's work a round); the
    complete graph's work only with ``peers_from=all``."""
    star = config("dfedu", graph="star", graph_schedule="random-peers")
    assert star.peers_from == "graph"
    assert build_graph(star, 8).num_edges == 7  # the star's edges
    assert build_graph(star.replace(peers_from="all"), 8).num_edges == 8 * 7 // 2


# -- rounds against oracles ------------------------------------------------------------------------
def test_a_scheduled_dfedu_round_is_dfedu_on_the_rounds_subgraph() -> None:
    full = complete_graph(N)
    sim = sim_on("dfedu", full, graph_schedule="random-peers", peers=1)
    d = sim.state.thetas[0].shape[1]
    bits = 0
    for r in (1, 2):
        active = sim.transport.faults.schedule.active(r)
        ref = sim_on("dfedu", round_subgraph(active, full))
        ref.state.thetas = [t.clone() for t in sim.state.thetas]
        sim.step()
        ref.step()
        torch.testing.assert_close(sim.state.thetas[0], ref.state.thetas[0], rtol=1e-6, atol=1e-7)
        bits += int(active.sum()) * d * 32  # one model per active half-edge
        assert sim.transport.bits == bits
    assert sim.transport.faults.counts()["dropped_messages"] == 0  # edges off are not dropped


def test_a_scheduled_dpsgd_round_is_the_dense_mean_over_the_rounds_partners() -> None:
    full = complete_graph(N)
    sim = sim_on("dpsgd", full, graph_schedule="exponential", local_steps=1)
    g = freeze_gradients(sim)[0].double().numpy()
    x = sim.state.thetas[0].double().numpy().copy()
    sim.step()
    active = Schedule("exponential", full).active(1)  # hop 1: i with i - 1 and i + 1
    mix = np.eye(N) + np.array([[float(j in p) for j in range(N)] for p in partners(active, full)])
    mix /= mix.sum(1, keepdims=True)  # complete graph's Metropolis weights renormalised: a plain mean
    expected = mix @ x - sim.config.alpha * g
    np.testing.assert_allclose(sim.state.thetas[0].double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_faults_apply_on_top_of_the_active_edges() -> None:
    full = complete_graph(N)
    sim = sim_on("dfedu", full, graph_schedule="random-peers", peers=2, link_drop_prob=0.3)
    d = sim.state.thetas[0].shape[1]
    plan = DropPlan(sim.config.seed, link_drop_prob=0.3)
    bits = dropped = 0
    for r in (1, 2, 3):
        active = sim.transport.faults.schedule.active(r)
        up = plan.link_up(r, np.arange(full.num_half_edges))
        bits += int((active & up).sum()) * d * 32
        dropped += int((active & ~up).sum())
        sim.step()
    assert sim.transport.bits == bits
    assert sim.transport.faults.counts()["dropped_messages"] == dropped > 0


def test_a_late_client_keeps_its_initial_model_and_its_neighbours_step_without_it() -> None:
    graph = complete_graph(N)
    sim = sim_on("dfedu", graph, join_round="0,0,3,0,0,0")
    without = ClientGraph(N, graph.edges[(graph.edges != 2).all(1)])
    ref = sim_on("dfedu", without)
    start = sim.theta(2).clone()
    for _ in range(2):
        sim.step()
        ref.step()
        torch.testing.assert_close(sim.theta(2), start, rtol=0, atol=0)
        for i in (0, 1, 3, 4, 5):
            torch.testing.assert_close(sim.theta(i), ref.theta(i), rtol=1e-6, atol=1e-7)
    scored = sim.evaluate()
    assert scored["per_client"][2] is None
    tested = [v for i, v in enumerate(scored["per_client"]) if i != 2]
    assert scored["test_metric"] == pytest.approx(float(np.mean(tested)), rel=1e-6)
    sim.step()  # round 3: it joins
    assert not torch.equal(sim.theta(2), start)
    assert sim.evaluate()["per_client"][2] is not None
    assert sim.transport.faults.counts()["dropped_messages"] == 0


def test_a_restored_snapshot_continues_the_same_schedule_across_a_join() -> None:
    def build() -> Simulation:
        return sim_on(
            "dfedu", complete_graph(N), graph_schedule="random-peers", peers=1, join_round="late:2@4"
        )

    whole, resumed = restored_beside(build, 3, 3)
    assert torch.equal(whole.state.thetas[0], resumed.state.thetas[0])
    assert resumed.transport.bits == whole.transport.bits


@pytest.mark.slow
@pytest.mark.parametrize(
    "keys",
    [
        {
            "algorithm": "dfedu",
            "lam": 0.1,
            "graph_schedule": "random-peers",
            "peers": 1,
            "join_round": "late:2@3",
        },
        {"algorithm": "sheaf-fmtl", "maps": "redrawn", "graph_schedule": "exponential", "drop_prob": 0.1},
        {
            "algorithm": "dpsgd",
            "graph_schedule": "random-peers",
            "peers_from": "graph",
            "link_drop_prob": 0.2,
        },
        {
            "algorithm": "dfedu",
            "compressor": "top-k",
            "compression": 0.05,
            "graph_schedule": "random-peers",
            "peers": 1,
            "join_round": "late:2@3",
        },
    ],
)
def test_two_processes_match_one_with_a_schedule(tmp_path: Path, keys: dict[str, object]) -> None:
    """Every rank draws the same round graphs and joins: the one-process run's numbers, bits and counts
    (CHOCO's per-edge copies sharded with their half-edges)."""
    _compare(tmp_path, {**TINY, "dataset": "synthetic", "rounds": 5, **keys}, 2)


# -- refusals --------------------------------------------------------------------------------------
def test_per_edge_maps_with_edges_among_everyone_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="peers_from") as err:
        config("sheaf-fmtl", maps="learned", graph_schedule="random-peers", peers_from="all")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="exponential"):
        config("sheaf-fmtl", maps="fixed", graph_schedule="exponential")
    config("sheaf-fmtl", maps="learned", graph_schedule="random-peers", peers_from="graph")  # base edges
    config("sheaf-fmtl", maps="redrawn", graph_schedule="exponential")


def test_powergossip_is_refused_with_changing_edges_or_late_joiners_in_one_line() -> None:
    with pytest.raises(ConfigError, match="powergossip") as err:
        config("dpsgd", compressor="powergossip", graph_schedule="random-peers")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="join_round") as err:
        config("dfedu", compressor="powergossip", join_round="late:1@5")
    assert "\n" not in str(err.value)
    config("dfedu", compressor="powergossip")
