"""``maps = functional``: the probe batches (the same at both ends, for any batch of edges, over a
shared feature space), the coupling ``J^T r`` against finite differences of the energy, a round of
linear models against a hand computation with lost messages, bits and FLOPs by hand counts, exact
resume, and the refused combinations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.maps.functional import FunctionalSheaf, FunctionalState
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.metrics.flops import per_sample_flops
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.runtime.run import loop
from sheaf_fmtl.runtime.run.launching.resume import resume
from sheaf_fmtl.sheaf.probes import noise_probes, pool_rows
from tests.runtime.run.checkpoints.test_checkpoint import _assert_same_run, _stopped
from tests.runtime.test_faults import GRAPH, FixedPlan, half_edge, install

LINEAR = {
    "algorithm": "sheaf-fmtl",
    "dataset": "synthetic-clusters",
    "clients": 4,
    "data": {"homogeneous": True, "min_samples": 10, "max_samples": 20},
    "maps": "functional",
    "lam": 0.5,
    "alpha": 0.1,
    "local_epochs": 1,
    "batch_size": 4,
    "probe_size": 5,
    "init": "per-client",
}


def sim_of(**changes: object) -> Simulation:
    return build_simulation(RunConfig(**{**LINEAR, **changes}), graph=GRAPH)


def inputs_by_half_edge(sim: Simulation, round_: int) -> dict[int, torch.Tensor]:
    state, alg = sim.state, sim.algorithm
    assert isinstance(state, FunctionalState) and isinstance(alg, FunctionalSheaf) and state.layout
    out = {}
    for k, b in enumerate(state.layout.buckets):
        for h, x in zip(b.half_edges.tolist(), alg._inputs(state, k, round_), strict=True):
            out[int(h)] = x
    return out


def test_probes_depend_on_seed_edge_and_round_only() -> None:
    full = noise_probes(3, np.arange(6), 2, 4, (1, 5, 5), "cpu")
    torch.testing.assert_close(noise_probes(3, np.array([4, 1]), 2, 4, (1, 5, 5), "cpu"), full[[4, 1]])
    assert not torch.equal(full, noise_probes(3, np.arange(6), 3, 4, (1, 5, 5), "cpu"))  # another round
    assert abs(float(full.mean())) < 0.1 and abs(float(full.std()) - 1) < 0.1
    rows = pool_rows(3, np.arange(6), 2, 50, 7, "cpu")
    assert rows.min() >= 0 and rows.max() < 7 and len(rows.unique()) == 7
    sim = sim_of()
    x = inputs_by_half_edge(sim, 0)
    for e in range(GRAPH.num_edges):  # both ends of an edge feed their models the same batch
        torch.testing.assert_close(x[2 * e], x[2 * e + 1])
    assert not torch.equal(x[0], x[2])  # another edge, another batch


def test_clients_that_see_different_features_take_their_columns_of_one_probe() -> None:
    cfg = RunConfig(
        **{**LINEAR, "data": {"min_samples": 10, "max_samples": 20}, "clients": 6, "graph": "complete"}
    )
    sim = build_simulation(cfg)
    features = sim.ctx.fed.dataset.features
    assert features is not None and len({len(f) for f in features}) > 1
    graph = sim.ctx.graph
    x = inputs_by_half_edge(sim, 1)
    for e, (i, j) in enumerate(graph.edges.tolist()):
        h_i = 2 * e if int(graph.src[2 * e]) == i else 2 * e + 1
        shared = np.intersect1d(features[i], features[j])
        col_i = [list(features[i]).index(g) for g in shared]
        col_j = [list(features[j]).index(g) for g in shared]
        torch.testing.assert_close(x[h_i][:, col_i], x[h_i ^ 1][:, col_j])


def energy_of_client(
    sim: Simulation, i: int, theta_i: torch.Tensor, theirs: dict[int, torch.Tensor]
) -> float:
    """``1/2 sum_j ||P_ij(theta_i) - P_ji(theta_j)||^2`` with the neighbours' maps held fixed."""
    x = inputs_by_half_edge(sim, 0)
    w, b = theta_i[:-2].view(2, -1).double(), theta_i[-2:].double()
    total = 0.0
    for h in np.flatnonzero(GRAPH.src == i).tolist():
        f = (x[h].double() @ w.T + b) / np.sqrt(x[h].shape[0])
        total += 0.5 * float(((f - theirs[h]) ** 2).sum())
    return total


def linear_maps(sim: Simulation, thetas: dict[int, torch.Tensor], round_: int) -> dict[int, torch.Tensor]:
    """``P_ij(theta_i)`` per half-edge for the linear models ``theta = [W (2 x 24), b (2)]``, by hand."""
    x = inputs_by_half_edge(sim, round_)
    out = {}
    for h in range(GRAPH.num_half_edges):
        t = thetas[int(GRAPH.src[h])].double()
        w, b = t[:-2].view(2, -1), t[-2:]
        out[h] = (x[h].double() @ w.T + b) / np.sqrt(x[h].shape[0])
    return out


def test_the_coupling_is_the_gradient_of_the_energy_by_finite_differences() -> None:
    sim = sim_of()
    state, alg = sim.state, sim.algorithm
    assert isinstance(state, FunctionalState) and isinstance(alg, FunctionalSheaf)
    theta = {i: sim.theta(i).clone() for i in range(4)}
    maps = linear_maps(sim, theta, 0)
    leaves, outs = alg.maps(state, sim.ctx, 0, grad=True)
    assert state.layout is not None
    theirs_by_h = {h: maps[h ^ 1] for h in range(GRAPH.num_half_edges)}
    theirs = [
        torch.stack([theirs_by_h[int(h)].reshape(-1).float() for h in b.half_edges])
        for b in state.layout.buckets
    ]
    pull = alg._pull(state, leaves, outs, theirs, None)[0]
    gen = torch.Generator().manual_seed(0)
    for i in range(4):
        row = pull[sim.ctx.fed.position[i]].double()
        for _ in range(3):
            v = torch.randn(theta[i].shape, generator=gen, dtype=torch.float64)
            eps = 1e-3
            up = energy_of_client(sim, i, theta[i].double() + eps * v, theirs_by_h)
            down = energy_of_client(sim, i, theta[i].double() - eps * v, theirs_by_h)
            assert float(row @ v) == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-6)


def test_a_round_of_linear_models_equals_the_hand_computation_with_lost_messages() -> None:
    coupled, alone = sim_of(), sim_of(lam=0.0)
    lost = {half_edge(GRAPH, 0, 1), half_edge(GRAPH, 2, 3)}  # 0 -> 1 and 2 -> 3 lost in round 1
    install(coupled, FixedPlan({}, {1: sorted(lost)}))
    alone.ctx.load_random_state(coupled.ctx.random_state())
    alone.step()  # the same local passes, no coupling
    trained = {i: alone.theta(i).clone() for i in range(4)}
    coupled.step()
    maps = linear_maps(coupled, trained, 0)
    x = inputs_by_half_edge(coupled, 0)
    cfg = coupled.config
    for i in range(4):
        pull = torch.zeros_like(trained[i], dtype=torch.float64)
        for h in np.flatnonzero(GRAPH.src == i).tolist():
            if h ^ 1 in lost:  # the neighbour's message to i did not arrive
                continue
            r = maps[h] - maps[h ^ 1]  # [B, 2]
            scale = 1 / np.sqrt(x[h].shape[0])
            pull[:-2] += (scale * r.T @ x[h].double()).reshape(-1)
            pull[-2:] += scale * r.sum(0)
        want = trained[i].double() - cfg.alpha * cfg.lam * pull
        torch.testing.assert_close(coupled.theta(i).double(), want, rtol=1e-5, atol=1e-6)


def test_bits_and_flops_are_counted_by_hand() -> None:
    cfg = RunConfig(**{**LINEAR, "rounds": 3, "eval_every": 3})
    out = loop.execute(cfg, None, sim=build_simulation(cfg, graph=GRAPH))
    s = out.summary
    assert s["transmitted_bits"] == 3 * GRAPH.num_half_edges * 5 * 2 * 32  # B x outputs per half-edge
    module = build_simulation(cfg, graph=GRAPH).ctx.fed.cohorts[0].module
    per = per_sample_flops(module, (24,), "classification")
    assert s["flops_sheaf"] == 3 * GRAPH.num_half_edges * 5 * per


def test_stopped_and_resumed_functional_run_equals_the_uninterrupted_one(tmp_path) -> None:
    changes = {"rounds": 6, "eval_every": 2, "drop_prob": 0.2, "link_drop_prob": 0.2, "clients": 6}
    config = RunConfig(**{**LINEAR, **changes, "data": {"min_samples": 10, "max_samples": 20}})
    loop.execute(config, tmp_path / "full")
    stopped = _stopped(config, tmp_path / "part", at=3)
    assert stopped["status"] == "interrupted"
    outcome = resume(tmp_path / "part")
    assert outcome.summary["resumed_from_round"] == 3
    _assert_same_run(tmp_path / "full", tmp_path / "part")


def _two_shapes() -> FederatedDataset:
    rng = np.random.default_rng(0)
    splits = []
    for size in (10, 12, 10, 12):
        x = rng.normal(size=(8, 1, size, size)).astype(np.float32)
        splits.append(ClientSplit(x, rng.integers(0, 3, 8), x[:2], rng.integers(0, 3, 2)))
    return FederatedDataset("images", "classification", 3, tuple(splits))


def test_probe_data_and_input_shapes_that_do_not_fit_are_refused_in_one_line(tmp_path) -> None:
    np.save(tmp_path / "wide.npy", np.zeros((9, 30), np.float32))
    np.save(tmp_path / "pool.npy", np.zeros((9, 24), np.float32))
    nan = np.zeros((9, 24))
    nan[4, 7] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.save(tmp_path / "huge.npy", np.full((9, 24), 1e300))  # finite, but not in float32
    np.save(tmp_path / "text.npy", np.full((9, 24), "a"))
    cases = [
        ({"probe_data": str(tmp_path / "nan.npy")}, "nan.npy: row 4 holds a NaN or infinite value"),
        ({"probe_data": str(tmp_path / "huge.npy")}, "huge.npy: row 0 holds a NaN or infinite value"),
        ({"probe_data": str(tmp_path / "text.npy")}, "text.npy holds <U1 values; give real numbers"),
        (
            {"probe_data": str(tmp_path / "wide.npy")},
            "holds inputs of shape (9, 30); the models take [P, 24]",
        ),
        ({"probe_data": str(tmp_path / "none.npy")}, "no such file"),
    ]
    for changes, message in cases:
        with pytest.raises(
            ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
        ) as err:
            sim_of(**changes)
        assert "\n" not in str(err.value)
    sim_of(probe_data=str(tmp_path / "pool.npy")).step()  # a pool of the right shape runs
    cfg = RunConfig(maps="functional", model="cnn-small", batch_size=4)
    with pytest.raises(ConfigError, match="take inputs of shapes") as err:
        build_simulation(cfg, dataset=_two_shapes(), graph=GRAPH)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="probe_size >= 1"):
        RunConfig(maps="functional", probe_size=0)
