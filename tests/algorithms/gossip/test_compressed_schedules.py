"""CHOCO's compressed gossip under a graph schedule (one copy per edge) against independent oracles:
the single-copy run when every edge talks (bit for bit), the copies at both ends of every edge, a
dense numpy round of compressed dFedU computed by hand from the copies, bits summed over the active
half-edges; the config's refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.gossip import compressed
from sheaf_fmtl.compression import COMPRESSORS
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.schedule import Schedule
from sheaf_fmtl.runtime.engine.simulate import Simulation
from sheaf_fmtl.sheaf.graph import ClientGraph
from tests._baselines_problems import (
    complete_graph,
    config,
    federation,
    regression_dataset,
    restored_beside,
    simulation,
)
from tests.runtime.test_faults import freeze_gradients

N = 5
SCHEDULED = {"graph_schedule": "random-peers", "peers": 1}


def sim_on(algorithm: str, graph: ClientGraph, **keys: Any) -> Simulation:
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9, 5)[: graph.num_nodes], features=9))
    keys = {"compression": 0.3, "quantization_bits": 3, "stability_check": False, **keys}
    return simulation(algorithm, fed, graph, **keys)


def test_per_edge_copies_exactly_when_the_runtime_builds_a_schedule() -> None:
    graph = complete_graph(4)
    for keys in (
        {},
        {"graph_schedule": "random-peers"},
        {"graph_schedule": "exponential"},
        {"join_round": "0,0,0,0"},
        {"join_round": "late:1@3"},
        {"join_round": " "},
    ):
        cfg = config("dfedu", compressor="top-k", **keys)
        assert compressed.per_edge_copies(cfg) == (Schedule.from_config(cfg, graph) is not None), keys


@pytest.mark.parametrize("how", ["join_round", "random-peers", "forced"])
@pytest.mark.parametrize("name", ["top-k", "qsgd"])
@pytest.mark.parametrize("algorithm", ["dfedu", "dpsgd"])
def test_every_edge_talking_gives_the_single_copy_numbers_bit_for_bit(
    algorithm: str, name: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every client joins at once, or each picks every other client, or per-edge copies on the fixed
    graph: each per-edge copy of ``x_i`` is the single copy ``xhat_i``, and the models the same bits."""
    graph = complete_graph(N)
    single = sim_on(algorithm, graph, compressor=name)
    keys: dict[str, Any] = {
        "join_round": {"join_round": ",".join(["0"] * N)},
        "random-peers": {"graph_schedule": "random-peers", "peers": N - 1},
        "forced": {},
    }[how]
    if how == "forced":
        monkeypatch.setattr(compressed, "per_edge_copies", lambda cfg: True)
    per_edge = sim_on(algorithm, graph, compressor=name, **keys)
    assert per_edge.state.estimate is None and single.state.edge_estimates is None
    src = torch.as_tensor(graph.src)
    for _ in range(4):
        single.step()
        per_edge.step()
        assert torch.equal(per_edge.state.thetas[0], single.state.thetas[0])
        assert torch.equal(per_edge.state.edge_estimates, single.state.estimate[src])
        assert torch.equal(per_edge.state.neighbour_estimates, single.state.neighbour_estimates)
    assert per_edge.transmitted_bits() == single.transmitted_bits() > 0
    assert not torch.equal(single.state.thetas[0], sim_on(algorithm, graph).state.thetas[0])


@pytest.mark.parametrize("name", ["top-k", "qsgd", "rand-k"])
@pytest.mark.parametrize(
    "keys",
    [
        SCHEDULED,
        {"graph_schedule": "exponential"},
        {"join_round": "0,2,0,4,0"},
        {**SCHEDULED, "drop_prob": 0.3},
    ],
    ids=["random-peers", "exponential", "join_round", "sitting-out"],
)
def test_the_copies_at_both_ends_of_every_edge_agree_under_a_schedule(
    name: str, keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At half-edge ``i -> j``, ``i``'s copy of ``x_j`` is ``j``'s own copy ``xhat_{j->i}``, bit for
    bit (a client sitting a round out misses it at both ends too); with one copy per client (the
    fixed graph's way) the copies drift apart."""
    graph = complete_graph(N)
    sim = sim_on("dfedu", graph, compressor=name, **keys)
    monkeypatch.setattr(compressed, "per_edge_copies", lambda cfg: False)
    one_copy = sim_on("dfedu", graph, compressor=name, **keys)
    rev, dst = torch.as_tensor(graph.rev), torch.as_tensor(graph.dst)
    for _ in range(5):
        sim.step()
        one_copy.step()
        assert torch.equal(sim.state.neighbour_estimates, sim.state.edge_estimates[rev])
    assert not torch.equal(one_copy.state.neighbour_estimates, one_copy.state.estimate[dst])
    mine = sim.state.edge_estimates.view(N, N - 1, -1)  # complete graph: N - 1 half-edges per client
    assert not torch.equal(mine[:, :1].expand_as(mine), mine)  # the edges' copies of x_i differ
    assert sim.finite()


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest-magnitude entries of ``x``, zero elsewhere."""
    out = np.zeros_like(x)
    keep = np.argsort(-np.abs(x), kind="stable")[:k]
    out[keep] = x[keep]
    return out


def test_a_scheduled_compressed_dfedu_round_by_hand() -> None:
    """From the copies before round 3: per active half-edge ``i -> j`` the messages ``C(theta_i -
    xhat_{i->j})`` and ``C(theta_j - xhat_{j->i})`` move both copies, and ``theta_i <- theta_i - alpha
    (g_i + lam gamma sum_j (xhat_{i->j} - xhat_j))`` over the round's partners."""
    graph = complete_graph(N)
    sim = sim_on("dfedu", graph, compressor="top-k", lam=0.5, local_steps=1, **SCHEDULED)
    g = freeze_gradients(sim)[0].numpy()
    sim.step()
    sim.step()
    theta = sim.state.thetas[0].numpy().copy()
    mine = sim.state.edge_estimates.numpy().copy()
    theirs = sim.state.neighbour_estimates.numpy().copy()
    assert np.abs(mine).sum() > 0  # copies of earlier rounds to start from
    active = Schedule("random-peers", graph, sim.config.seed, peers=1).active(3)
    assert active is not None and 0 < active.sum() < graph.num_half_edges
    k = max(1, int(0.3 * theta.shape[1]))
    pull = np.zeros_like(theta)
    for h in np.flatnonzero(active):
        i, j = graph.src[h], graph.dst[h]
        mine[h] = mine[h] + top_k(theta[i] - mine[h], k)
        theirs[h] = theirs[h] + top_k(theta[j] - sim.state.edge_estimates.numpy()[graph.rev[h]], k)
        pull[i] += mine[h] - theirs[h]
    step = sim.algorithm.lam * sim.state.consensus_step
    expected = theta - sim.config.alpha * (g + step * pull)
    sim.step()
    np.testing.assert_array_equal(sim.state.edge_estimates.numpy(), mine)
    np.testing.assert_array_equal(sim.state.neighbour_estimates.numpy(), theirs)
    np.testing.assert_allclose(sim.state.thetas[0].numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("algorithm", ["dfedu", "dpsgd"])
def test_bits_are_one_message_per_active_half_edge(algorithm: str) -> None:
    graph = complete_graph(N)
    sim = sim_on(algorithm, graph, compressor="top-k", link_drop_prob=0.2, **SCHEDULED)
    width = sim.algorithm.exchange.message_bits(0)
    bits = 0
    for r in (1, 2, 3):
        active = sim.transport.faults.schedule.active(r)
        up = sim.transport.faults.plan.link_up(r, np.arange(graph.num_half_edges))
        bits += int((active & up).sum()) * width
        sim.step()
    assert sim.transmitted_bits() == bits > 0
    assert sim.transmitted_bits() < sim.analytic_bits(3)


def test_a_restored_snapshot_continues_the_per_edge_copies() -> None:
    def build() -> Simulation:
        return sim_on("dpsgd", complete_graph(N), compressor="qsgd", join_round="late:2@3", **SCHEDULED)

    whole, resumed = restored_beside(build, 2, 3)
    assert torch.equal(whole.state.thetas[0], resumed.state.thetas[0])
    assert torch.equal(whole.state.edge_estimates, resumed.state.edge_estimates)


def test_choco_compressors_run_with_schedules() -> None:
    for name in COMPRESSORS:  # the CHOCO compressors
        RunConfig(algorithm="dfedu", compressor=name, graph_schedule="exponential")
        RunConfig(algorithm="dpsgd", compressor=name, graph_schedule="random-peers", join_round="late:1@5")
