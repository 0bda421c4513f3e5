"""The training protocol: common initial models, local epochs (against per-client loops
and a dense Laplacian), the start-up stability check (against a dense eigenvalue solver) and
Theorem 1's map-step warning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.reference.dense import dense_laplacian
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf.graph import make_graph
from sheaf_fmtl.sheaf.stability import laplacian_lambda_max
from sheaf_fmtl.streams import CounterStreams
from tests.conftest import make_dataset

SIZES = [23, 7, 16, 5, 11, 30]  # unequal clients: ceil(n/4) = 6, 2, 4, 2, 3, 8 steps a pass


def _unequal(dims: list[int] | None = None, seed: int = 0) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    dims = dims or [4] * len(SIZES)
    clients = []
    for n, d in zip(SIZES, dims, strict=True):
        clients.append(
            ClientSplit(
                rng.normal(size=(n, d)).astype(np.float32),
                rng.integers(0, 3, n),
                rng.normal(size=(5, d)).astype(np.float32),
                rng.integers(0, 3, 5),
            )
        )
    return FederatedDataset("unequal", "classification", 3, tuple(clients))


def _sim(cfg: RunConfig, dataset: FederatedDataset, p: float = 0.6):
    fed = build_federation(dataset, "logistic", l2=cfg.l2)
    return build_simulation(cfg, fed=fed, graph=make_graph("erdos-renyi", fed.num_clients, p=p, seed=1))


def _client(sim, i: int) -> torch.Tensor:
    return sim.theta(i).detach().clone()


# ------------------------------------------------------------------------------------ initial models


def test_common_initial_model_is_shared_within_an_architecture_and_per_client_differs():
    dataset = make_dataset([3, 5, 3, 4, 5, 3])
    common = _sim(RunConfig(), dataset)
    per = _sim(RunConfig(init="per-client"), dataset)
    for thetas in common.state.thetas:
        assert torch.equal(thetas, thetas[:1].expand_as(thetas))
    for thetas in per.state.thetas:
        if len(thetas) > 1:
            assert not torch.equal(thetas[0], thetas[1])
    assert not torch.equal(common.state.thetas[0][0], common.state.thetas[1][0][:4])  # cohorts differ


def test_dpsgd_starts_every_client_from_one_model():
    sim = _sim(RunConfig(algorithm="dpsgd"), make_dataset([4] * 6))
    (thetas,) = sim.state.thetas
    assert torch.equal(thetas, thetas[:1].expand_as(thetas))


# ------------------------------------------------------------------------------------ local epochs


def test_one_local_epoch_takes_ceil_n_over_b_steps_and_sees_every_sample_once():
    sim = _sim(RunConfig(algorithm="local", local_epochs=1, batch_size=4), _unequal())
    ctx = sim.ctx
    (cohort,) = ctx.fed.cohorts
    assert ctx.local_steps() == math.ceil(max(SIZES) / 4)
    steps = np.zeros(len(SIZES), int)
    seen: list[list[int]] = [[] for _ in SIZES]
    for _ in range(2):  # two passes: a fresh order each, every sample once per pass
        for c in seen:
            c.clear()
        steps[:] = 0
        for _ in range(ctx.local_steps()):
            (batch,) = ctx.next_batches()
            assert batch is not None
            active = range(len(SIZES)) if batch.active is None else batch.active.tolist()
            for row, client in enumerate(active):
                m = batch.mask[row].bool()
                steps[client] += int(m.any())
                x = batch.x[row][m]
                full = cohort.x_train[client, : SIZES[client]]
                seen[client] += [int((full == r).all(1).nonzero()) for r in x]
        assert steps.tolist() == [math.ceil(n / 4) for n in SIZES]
        assert all(sorted(s) == list(range(n)) for s, n in zip(seen, SIZES, strict=True))


def test_local_epoch_equals_per_client_sgd_loops_on_the_same_batches():
    """The stacked, masked epoch against each client's own SGD loop in float64 autograd."""
    cfg = RunConfig(algorithm="local", local_epochs=1, batch_size=4, alpha=0.3, l2=0.01)
    sim = _sim(cfg, _unequal())
    (cohort,) = sim.ctx.fed.cohorts
    start = [_client(sim, i).double() for i in range(len(SIZES))]
    streams = CounterStreams(0, range(len(SIZES)))  # a copy of the run's per-client batch streams
    streams.load_state(sim.ctx.fed.random_state()["batch"])
    order = cohort.epoch(4, streams).order  # the order the run will draw
    sim.step()
    for i, n in enumerate(SIZES):
        theta = start[i].clone()
        x_all, y_all = cohort.x_train[i].double(), cohort.y_train[i]
        for s in range(math.ceil(n / 4)):
            idx = order[i, s * 4 : min((s + 1) * 4, n)]
            th = theta.clone().requires_grad_(True)
            w, b = th[:12].view(3, 4), th[12:]
            loss = F.cross_entropy(x_all[idx] @ w.T + b, y_all[idx]) + 0.005 * (th * th).sum()
            (g,) = torch.autograd.grad(loss, th)
            theta = theta - 0.3 * g
        torch.testing.assert_close(_client(sim, i).double(), theta, rtol=1e-5, atol=1e-6)


def test_sheaf_epoch_round_is_local_pass_then_map_step_then_coupling_with_dense_laplacian():
    """One round, learned maps: thetas after the local pass (a lam = 0 run), maps after eq.
    (19) ``pijaupdate`` at those thetas, then theta - alpha lam L' theta with L' built densely."""
    dataset = _unequal([4, 6, 4, 5, 6, 4])
    base = dict(local_epochs=1, batch_size=4, alpha=0.2, eta=0.05, gamma=0.5, l2=0.01)
    sim = _sim(RunConfig(lam=0.4, **base), dataset)
    loc = _sim(RunConfig(algorithm="local", **base), dataset)
    layout, graph = sim.state.layout, sim.ctx.graph
    maps0 = {}
    for b, m in zip(layout.buckets, sim.state.maps, strict=True):
        for k, h in enumerate(b.half_edges.tolist()):
            maps0[(int(graph.src[h]), int(graph.dst[h]))] = m[k].double().clone()
    sim.step()
    loc.step()
    n = len(SIZES)
    trained = [_client(loc, i).double() for i in range(n)]
    new_maps = {}
    for (i, j), p in maps0.items():
        r = p @ trained[i] - maps0[(j, i)] @ trained[j]
        new_maps[(i, j)] = p - 0.05 * 0.4 * torch.outer(r, trained[i])
    dims = np.array([len(t) for t in trained])
    lap = dense_laplacian(graph, dims, layout.edge_dims, lambda i, j: new_maps[(i, j)].numpy())
    flat = torch.cat(trained).numpy()
    expected = flat - 0.2 * 0.4 * lap @ flat
    got = torch.cat([_client(sim, i).double() for i in range(n)]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("defer", [1, 2])
def test_epoch_mode_compact_and_literal_messages_give_the_same_iterates(defer):
    dataset = _unequal([4, 6, 4, 5, 6, 4])
    base = dict(local_epochs=1, batch_size=4, lam=0.3, alpha=0.1, eta=0.05, gamma=0.5, map_defer=defer)
    compact = _sim(RunConfig(message_mode="compact", **base), dataset)
    literal = _sim(RunConfig(message_mode="literal", **base), dataset)
    for _ in range(4):
        compact.step()
        literal.step()
    for a, b in zip(compact.state.thetas, literal.state.thetas, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert compact.transport.bits < 0.75 * literal.transport.bits  # one vector + a scalar vs two


def test_epoch_mode_identity_maps_equal_dfedu():
    dataset = _unequal()
    base = dict(local_epochs=1, batch_size=4, lam=0.3, alpha=0.1)
    sheaf = _sim(RunConfig(gamma=1.0, eta=0.0, map_init="identity", edge_weights="graph", **base), dataset)
    dfedu = _sim(RunConfig(algorithm="dfedu", **base), dataset)
    for _ in range(3):
        sheaf.step()
        dfedu.step()
    torch.testing.assert_close(sheaf.state.thetas[0], dfedu.state.thetas[0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ stability


def test_power_iteration_matches_the_dense_largest_eigenvalue():
    dataset = make_dataset([3, 5, 3, 4, 5, 3])
    sim = _sim(RunConfig(map_scale=1.0, gamma=0.6), dataset)
    layout, graph = sim.state.layout, sim.ctx.graph
    maps = {}
    for b, m in zip(layout.buckets, sim.state.maps, strict=True):
        for k, h in enumerate(b.half_edges.tolist()):
            maps[(int(graph.src[h]), int(graph.dst[h]))] = m[k].double().numpy()
    dims = sim.ctx.fed.node_dims()
    lap = dense_laplacian(graph, dims, layout.edge_dims, lambda i, j: maps[(i, j)])
    exact = float(np.linalg.eigvalsh(lap)[-1])
    estimate = laplacian_lambda_max(layout, sim.state.thetas, sim.state.store, iters=300)
    assert estimate <= exact * (1 + 1e-6)  # a Rayleigh quotient (float32 products)
    assert estimate == pytest.approx(exact, rel=1e-3)


def test_stability_check_refuses_a_diverging_configuration_and_accepts_the_defaults():
    dataset = make_dataset([3, 5, 3, 4, 5, 3])
    _sim(RunConfig(), dataset)  # defaults: no error
    with pytest.raises(ConfigError, match="alpha\\*lam\\*lambda_max"):
        _sim(RunConfig(map_scale=1.0, lam=1.0, alpha=1.0), dataset)
    with pytest.raises(ConfigError, match="graph Laplacian"):
        _sim(RunConfig(algorithm="dfedu", lam=10.0, alpha=1.0), make_dataset([4] * 6))
    _sim(RunConfig(map_scale=1.0, lam=1.0, alpha=1.0, stability_check=False), dataset)  # opt-out


def test_the_refused_configuration_really_diverges():
    dataset = make_dataset([3, 5, 3, 4, 5, 3])
    cfg = RunConfig(map_scale=1.0, lam=1.0, alpha=1.0, eta=0.0, stability_check=False, batch_size=0)
    sim = _sim(cfg, dataset)
    for _ in range(60):
        sim.step()
    assert not sim.finite() or max(float(t.abs().max()) for t in sim.state.thetas) > 1e6


def test_theorem1_map_step_warning_is_given_once():
    sim = _sim(RunConfig(eta=1e3, lam=0.5), make_dataset([3, 5, 3, 4, 5, 3]))
    sim.step()
    first = sim.diagnose()
    assert any("Theorem 1" in n and "since round 1 " in n for n in first)  # tracked every round
    sim.step()
    assert not any("Theorem 1" in n for n in sim.diagnose())
    quiet = _sim(RunConfig(maps="learned"), make_dataset([3, 5, 3, 4, 5, 3]))  # (asked for: no fallback)
    quiet.step()
    assert quiet.diagnose() == []


def test_shared_maps_start_equal_on_equal_size_edges_and_independent_otherwise():
    from sheaf_fmtl.sheaf.layout import build_layout
    from sheaf_fmtl.sheaf.maps import init_maps

    graph = make_graph("complete", 4)
    dims = [6, 6, 9, 6]
    layout = build_layout(graph, dims, [0, 0, 1, 0], 0.5)
    maps = init_maps(layout, "gaussian", generator=torch.Generator().manual_seed(0), shared=True)
    where = {
        int(h): m[k]
        for b, m in zip(layout.buckets, maps, strict=True)
        for k, h in enumerate(b.half_edges.tolist())
    }
    for h in range(graph.num_half_edges):
        a, b = where[h], where[int(graph.rev[h])]
        same = a.shape == b.shape and torch.equal(a, b)
        assert same == (dims[graph.src[h]] == dims[graph.dst[h]]), h


def test_shared_fixed_maps_pull_the_shared_projections_together():
    """With P_ji = P_ij = Q fixed, the coupling step moves Q theta_i and Q theta_j towards each other."""
    dataset = make_dataset([4] * 6)
    cfg = RunConfig(shared_maps=True, eta=0.0, lam=2.0, alpha=0.1, gamma=0.5, local_epochs=1, batch_size=4)
    sim = _sim(cfg, dataset)
    loc = _sim(cfg.replace(algorithm="local"), dataset)
    for _ in range(5):
        sim.step()
        loc.step()
    sheaf_energy = float(sim.algorithm.penalty(sim.state, sim.ctx)[1])
    sim.state.thetas = loc.state.thetas  # the same maps, applied to the uncoupled models
    local_energy = float(sim.algorithm.penalty(sim.state, sim.ctx)[1])
    assert sheaf_energy < 0.5 * local_energy


@pytest.mark.parametrize("init", ["gaussian", "uniform"])
def test_maps_drawn_per_bucket_on_the_device_keep_the_scale_and_the_sharing(init):
    from sheaf_fmtl.sheaf.layout import build_layout
    from sheaf_fmtl.sheaf.maps import init_maps

    graph = make_graph("complete", 4)
    layout = build_layout(graph, [400] * 4, [0] * 4, 0.5)
    (host,) = init_maps(layout, init, generator=torch.Generator().manual_seed(0), shared=True)
    (dev,) = init_maps(layout, init, generator=torch.Generator().manual_seed(0), shared=True, on_device=True)
    assert not torch.equal(host, dev)  # another generator: the same law, not the same numbers
    assert float(dev.std()) == pytest.approx(float(host.std()), rel=0.02)  # 1/sqrt(d_i) = 0.05 both
    assert float(dev.std()) == pytest.approx(0.05, rel=0.02)
    pos = {int(h): k for k, h in enumerate(layout.buckets[0].half_edges.tolist())}
    for h in range(graph.num_half_edges):
        assert torch.equal(dev[pos[h]], dev[pos[int(graph.rev[h])]])
