"""Compressed gossip on the baselines' couplings (CHOCO-SGD's copies, PowerGossip's low rank) against
independent oracles: the uncompressed baselines when nothing is dropped, a per-client loop of
CHOCO's copy update, a per-edge loop of PowerGossip's power step; bits measured against the
formula; the config's refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sheaf_fmtl.compression import Draw, make_compressor
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf.selection import dense_maps
from tests._baselines_problems import (
    complete_graph,
    federation,
    path_graph,
    regression_dataset,
    simulation,
)

CHOCO = ("top-k", "rand-k", "rand-k-seeded", "qsgd", "sign")


def _run(sim, rounds: int = 4) -> torch.Tensor:  # noqa: ANN001
    for _ in range(rounds):
        sim.step()
    return sim.state.thetas[0].clone()


@pytest.mark.parametrize("local_epochs", [0, 1])
def test_dfedu_keeping_every_value_is_uncompressed_dfedu(local_epochs: int) -> None:
    """top-k with k = d sends the whole difference: the copies equal the models after each exchange,
    and the consensus step at gamma = 1 is dFedU's coupling step."""
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9)))
    graph = complete_graph(4)
    keys = {"local_epochs": local_epochs, "batch_size": 4 if local_epochs else 0}
    plain = _run(simulation("dfedu", fed, graph, **keys))
    sim = simulation("dfedu", fed, graph, compressor="top-k", compression=1.0, consensus_step=1.0, **keys)
    torch.testing.assert_close(_run(sim), plain, rtol=1e-5, atol=1e-6)


def test_dpsgd_keeping_every_value_is_adapt_then_combine_dpsgd() -> None:
    """CHOCO-SGD with the identity compressor and gamma = 1: x <- W (x - alpha g), D-PSGD's atc order."""
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9, 5)))
    graph = path_graph(5)
    plain = _run(simulation("dpsgd", fed, graph, dpsgd_order="atc"))
    sim = simulation("dpsgd", fed, graph, compressor="top-k", compression=1.0, consensus_step=1.0)
    torch.testing.assert_close(_run(sim), plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", CHOCO)
def test_copies_follow_choco_update_and_agree_at_both_ends(name: str) -> None:
    """Every client's copy moves by ``C(theta_i - xhat_i)`` (a per-client loop of the compressor on
    one row at a time), and every neighbour's copy of it is the same numbers."""
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9), features=9))
    graph = complete_graph(4)
    sim = simulation("dfedu", fed, graph, compressor=name, compression=0.3, quantization_bits=3)
    comp = make_compressor(name, fraction=0.3, quantization_bits=3)
    state, d = sim.state, fed.cohorts[0].dim
    expected = torch.zeros(4, d)
    for r in range(3):
        sim.algorithm.local(state, sim.ctx)
        theta = state.thetas[0].clone()
        for i in range(4):
            draw = Draw(sim.config.seed, r, torch.tensor([i]))
            wire = comp.encode((theta[i] - expected[i])[None], draw)
            expected[i] += comp.decode(wire, d, draw)[0]
        incoming = sim.transport.exchange(sim.algorithm.send(state, 0, sim.ctx))
        sim.state = state = sim.algorithm.receive(state, incoming, 0, sim.ctx)
        torch.testing.assert_close(state.estimate, expected, rtol=1e-6, atol=1e-6)
        dst = torch.as_tensor(graph.dst)
        assert torch.equal(state.neighbour_estimates, state.estimate[dst])


def test_powergossip_differences_match_a_per_edge_power_step() -> None:
    """Two exchanges of PowerGossip on fixed models against a loop over edges: orthonormalised
    factor, ``D = (X_a - X_b) F`` then ``(X_a - X_b)^T F'``, ``D F^T`` / ``F' D'^T``, antisymmetric."""
    config = RunConfig(
        dataset="synthetic", clients=4, rounds=2, compressor="powergossip", rank=2, algorithm="dfedu", lam=0.0
    )
    sim = build_simulation(config)
    state, graph = sim.state, sim.ctx.graph
    cohort = sim.ctx.fed.cohorts[0]
    (m, n) = cohort.shapes[0]
    torch.manual_seed(0)
    theta = torch.randn_like(state.thetas[0])
    factors = dense_maps("gaussian", config.seed, np.arange(graph.num_edges), 1 << 20, 2, n, "cpu")
    factors = list(factors.transpose(1, 2))  # per edge [n, r]
    for t in range(2):
        payload = sim.algorithm.exchange.send(state, theta)
        incoming = sim.transport.exchange({"model": payload})
        sim.algorithm.exchange.receive(state, incoming["model"])
        for e, (a, b) in enumerate(graph.edges):
            delta = (theta[a, : m * n] - theta[b, : m * n]).view(m, n).double()
            f = torch.linalg.qr(factors[e].double()).Q
            if t % 2 == 0:
                d = delta @ f
                approx = d @ f.T
            else:
                d = delta.T @ f
                approx = f @ d.T
            factors[e] = d.float()
            got = state.edge_differences[2 * e, : m * n].view(m, n).double()
            torch.testing.assert_close(got, approx, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(state.edge_differences[2 * e + 1], -state.edge_differences[2 * e])
            bias = theta[a, m * n :] - theta[b, m * n :]
            torch.testing.assert_close(state.edge_differences[2 * e, m * n :], bias)


@pytest.mark.parametrize("name", [*CHOCO, "powergossip"])
@pytest.mark.parametrize("algorithm", ["dfedu", "dpsgd"])
def test_measured_bits_equal_the_formula(name: str, algorithm: str) -> None:
    config = RunConfig(
        dataset="synthetic",
        clients=6,
        rounds=3,
        eval_every=3,
        algorithm=algorithm,
        compressor=name,
        compression=0.05,
        graph_p=0.6,
    )
    sim = build_simulation(config)
    for _ in range(3):
        sim.step()
    assert sim.transmitted_bits() == sim.analytic_bits(3) > 0
    whole = 3 * sim.ctx.graph.num_half_edges * sim.ctx.fed.cohorts[0].dim * 32
    assert sim.transmitted_bits() < whole


def test_top_k_on_synthetic_sends_its_indices() -> None:
    """d = 610, 1%: 6 values a message, each with a 10-bit index (cheaper than a 610-bit mask)."""
    config = RunConfig(dataset="synthetic", rounds=2, algorithm="dfedu", compressor="top-k", compression=0.01)
    sim = build_simulation(config)
    sim.step()
    d, halves = sim.ctx.fed.cohorts[0].dim, sim.ctx.graph.num_half_edges
    assert d == 610
    per_message = sim.transmitted_bits() / halves
    assert per_message == 8 * math.ceil((6 * 32 + 6 * 10) / 8)
    assert per_message / 6 > 32


def test_rand_k_seeded_sends_what_redrawn_maps_send() -> None:
    base = {"dataset": "synthetic", "clients": 8, "rounds": 3}
    a = build_simulation(RunConfig(**base, algorithm="dfedu", compressor="rand-k-seeded", compression=0.07))
    b = build_simulation(RunConfig(**base, maps="redrawn", gamma=0.07, edge_weights="graph"))
    for _ in range(3):
        a.step()
        b.step()
    assert a.transmitted_bits() == b.transmitted_bits() > 0


@pytest.mark.parametrize("name", ["top-k", "qsgd"])
def test_lost_messages_leave_copies_behind_and_runs_stay_finite(name: str) -> None:
    config = RunConfig(
        dataset="synthetic",
        clients=6,
        rounds=5,
        algorithm="dfedu",
        compressor=name,
        link_drop_prob=0.3,
        drop_prob=0.2,
        graph_p=0.6,
    )
    sim = build_simulation(config)
    for _ in range(5):
        sim.step()
    assert sim.finite() and sim.transport.faults.counts()["dropped_messages"] > 0
    assert sim.transmitted_bits() < sim.analytic_bits(5)


def test_config_refuses_what_does_not_apply() -> None:
    with pytest.raises(ConfigError, match="compressor.*dfedu or dpsgd"):
        RunConfig(algorithm="sheaf-fmtl", compressor="top-k")
    with pytest.raises(ConfigError, match="reliable links"):
        RunConfig(algorithm="dpsgd", compressor="powergossip", link_drop_prob=0.1)
    with pytest.raises(ConfigError, match="compression"):
        RunConfig(algorithm="dfedu", compressor="top-k", compression=0.0)
    with pytest.raises(ConfigError, match="compressor"):
        RunConfig(algorithm="dfedu", compressor="top-q")


def test_default_consensus_step_follows_the_compressor_quality() -> None:
    """D-PSGD: gamma = min(1, (omega / (2 - omega)) / lambda_max(I - W)), given: as given."""
    base = {"dataset": "synthetic", "clients": 6, "algorithm": "dpsgd", "compressor": "top-k"}
    sim = build_simulation(RunConfig(**base, compression=0.1))
    omega = sim.algorithm.exchange.omega
    assert math.isclose(omega, 61 / 610)
    graph = sim.ctx.graph  # I - W built densely from the Metropolis-Hastings rule, by hand
    deg = graph.degrees()
    lap = np.zeros((graph.num_nodes, graph.num_nodes))
    for i, j in graph.edges:
        w = 1.0 / (1.0 + max(deg[i], deg[j]))
        lap[i, j] = lap[j, i] = -w
        lap[i, i] += w
        lap[j, j] += w
    mu = float(np.linalg.eigvalsh(lap).max())
    expected = min(1.0, 0.5 * (2 * omega / (2 - omega)) / mu)
    assert sim.state.consensus_step == pytest.approx(expected, rel=1e-3) and expected < 1
    assert "omega" in sim.state.consensus_note
    given = build_simulation(RunConfig(**base, compression=0.1, consensus_step=0.3))
    assert given.state.consensus_step == 0.3
