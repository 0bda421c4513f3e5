"""Sheaf-FMTL with maps that relate coordinates (``maps = redrawn | features | aligned``) against
dense numpy rounds built from the maps themselves, the dense implementation of feature maps, dFedU
(gamma = 1) and hand counts; the redrawn maps' draws; the refused combinations."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.maps.coordinate_stability import refresh_limit
from sheaf_fmtl.algorithms.maps.coordinate_state import CoordinateState, flat_index
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.data.synthetic import clusters_feature_sets
from sheaf_fmtl.models import build_model
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation, load_dataset
from sheaf_fmtl.runtime.run.loop import execute
from sheaf_fmtl.scenarios import shared_feature_maps
from sheaf_fmtl.sheaf.graph import ClientGraph
from sheaf_fmtl.sheaf.selection import (
    SelectionDraws,
    dense_maps,
    selection_positions,
)
from sheaf_fmtl.sheaf.supports import aligned_support, feature_support
from tests.runtime.test_faults import GRAPH, FixedPlan, freeze_gradients, half_edge, install

HOMOGENEOUS = {
    "algorithm": "sheaf-fmtl",
    "dataset": "synthetic-clusters",
    "clients": 4,
    "data": {"homogeneous": True, "min_samples": 10, "max_samples": 20},
    "local_epochs": 0,
    "batch_size": 0,
    "alpha": 0.1,
    "lam": 0.5,
    "gamma": 0.2,
    "maps": "redrawn",
    "init": "per-client",
    "edge_weights": "graph",  # the coupling itself (learned weights: test_edge_weights.py)
}


def sim_of(graph: ClientGraph = GRAPH, **changes: object) -> Simulation:
    return build_simulation(RunConfig(**{**HOMOGENEOUS, **changes}), graph=graph)


def thetas(sim: Simulation) -> dict[int, np.ndarray]:
    return {i: sim.theta(i).double().numpy().copy() for i in range(sim.ctx.fed.num_clients)}


def copies(sim: Simulation, own: bool = False) -> dict[tuple[int, int], np.ndarray]:
    """``(i, j) -> xhat_(j|e)`` held at half-edge ``i -> j`` (``own``: ``xhat_(i|e)``, i's copy of itself)."""
    state = sim.state
    assert isinstance(state, CoordinateState) and state.layout is not None
    held = state.own_copies if own else state.estimates
    assert held is not None
    g, out = sim.ctx.graph, {}
    for b, est in zip(state.layout.buckets, held, strict=True):
        for k, h in enumerate(b.half_edges.tolist()):
            out[(int(g.src[h]), int(g.dst[h]))] = est[k].double().numpy().copy()
    return out


def round_maps(cfg: RunConfig, graph: ClientGraph, d: int, round_: int) -> dict[int, np.ndarray]:
    """Each edge's ``S_(e,t)`` as a dense ``[d_e, d]`` matrix."""
    d_e = max(1, int(np.floor(cfg.gamma * d)))
    out = {}
    for e in range(graph.num_edges):
        if cfg.map_kind == "selection":
            pos = selection_positions(cfg.seed, np.array([e]), round_, np.array([d]), np.array([d_e]), "cpu")
            out[e] = np.eye(d)[pos.numpy()]
        else:
            out[e] = (
                dense_maps(cfg.map_kind, cfg.seed, np.array([e]), round_, d_e, d, "cpu")[0].double().numpy()
            )
    return out


def oracle_round(sim, theta, est, grads, round_, heard):  # noqa: ANN001, ANN201
    """One round in numpy: ``theta_i - alpha (g_i + lam sum_j a_ij S^T (S theta_i - S theta_j))``, or
    with estimates (``est[(i, j)]``: the copy of ``theta_j`` held at ``i``; ``est[(i, i, j)]``: ``i``'s
    copy of itself on edge ``{i, j}``) both copies refreshed ``x += S^+ (S theta - S x)`` then
    ``theta_i - alpha (g_i + lam sum_j a_ij (xhat_(i|e) - xhat_(j|e)))``; ``(i, j)`` heard: ``i``
    received ``j``'s message."""
    cfg, graph = sim.config, sim.ctx.graph
    maps = round_maps(cfg, graph, len(theta[0]), round_)
    est = dict(est) if est is not None else None
    new = {}
    for i, t in theta.items():
        pull = np.zeros_like(t)
        for h in np.flatnonzero(graph.src == i):
            j, s, a = int(graph.dst[h]), maps[int(h) // 2], graph.weights[int(h) // 2]
            if (i, j) not in heard:
                continue
            if est is None:
                pull += a * s.T @ (s @ t - s @ theta[j])
            else:
                est[i, j] = est[i, j] + np.linalg.pinv(s) @ (s @ theta[j] - s @ est[i, j])
                est[i, i, j] = est[i, i, j] + np.linalg.pinv(s) @ (s @ t - s @ est[i, i, j])
                pull += a * (est[i, i, j] - est[i, j])
        new[i] = t - cfg.alpha * (grads[i] + cfg.lam * pull)
    return new, est


def both_copies(sim: Simulation) -> dict[tuple[int, ...], np.ndarray]:
    """``copies`` keyed ``(i, j)`` and the own copies keyed ``(i, i, j)``."""
    own = {(i, i, j): v for (i, j), v in copies(sim, own=True).items()}
    return {**copies(sim), **own}


WEIGHTED = ClientGraph(4, GRAPH.edges, weights=np.array([0.5, 2.0, 1.0, 0.25, 1.5]))


@pytest.mark.parametrize("kind", ["selection", "orthonormal", "gaussian"])
@pytest.mark.parametrize("estimates", [False, True])
@pytest.mark.parametrize("graph", [GRAPH, WEIGHTED], ids=["unweighted", "weighted"])
def test_redrawn_rounds_equal_the_dense_oracle_with_lost_messages(
    kind: str, estimates: bool, graph: ClientGraph
) -> None:
    sim = sim_of(graph, map_kind=kind, estimates=estimates, stability_check=False)  # the algebra only
    lost = [half_edge(GRAPH, 0, 1), half_edge(GRAPH, 1, 0), half_edge(GRAPH, 2, 3)]
    install(sim, FixedPlan({}, {2: lost}))  # the plan counts rounds from 1: the second round
    g = freeze_gradients(sim)
    grads = {i: g[0][i].double().numpy() for i in range(4)}
    every = {(int(a), int(b)) for a, b in zip(GRAPH.src, GRAPH.dst, strict=True)}
    theta = thetas(sim)
    est = {k: np.zeros_like(v) for k, v in both_copies(sim).items()} if estimates else None
    for round_, heard in enumerate([every, every - {(1, 0), (0, 1), (3, 2)}, every]):
        theta, est = oracle_round(sim, theta, est, grads, round_, heard)
        sim.step()
        got = thetas(sim)
        for i in range(4):
            np.testing.assert_allclose(got[i], theta[i], rtol=1e-5, atol=1e-6)
        if est is not None:
            held = both_copies(sim)
            assert held.keys() == est.keys()
            for key, value in held.items():
                np.testing.assert_allclose(value, est[key], rtol=1e-5, atol=1e-5)
    d, d_e = len(theta[0]), int(np.floor(0.2 * len(theta[0])))
    assert sim.transport.bits == 32 * d_e * (3 * GRAPH.num_half_edges - len(lost))
    pairs = zip(graph.edges.tolist(), graph.weights, strict=True)
    energy = sum(a * d_e / d * np.sum((theta[i] - theta[j]) ** 2) for (i, j), a in pairs)
    assert sim.evaluate()["sheaf_energy"] == pytest.approx(energy, rel=1e-4)


def test_int32_positions_and_in_place_flat_index_equal_the_int64_ones() -> None:
    sim = sim_of(GRAPH, map_kind="selection", stability_check=False)
    state = sim.state
    assert isinstance(state, CoordinateState) and state.layout is not None
    m = state.layout.node_dims[state.layout.graph.src[state.layout.order]]
    draws = SelectionDraws(5, state.layout.order // 2, m, state.layout.messages.sizes, "cpu")
    wide, narrow = draws.positions(3), draws.positions(3, torch.int32)
    assert narrow.dtype == torch.int32 and torch.equal(narrow.long(), wide)
    layout, thetas = state.layout, state.thetas
    expected = flat_index(layout, thetas, layout.bucket_messages(wide))
    got = flat_index(layout, thetas, layout.bucket_messages(narrow), in_place=True)
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == torch.int32 and torch.equal(g.long(), e)
    assert got[0].data_ptr() == narrow.data_ptr()  # written over the draws: no second buffer


@pytest.mark.slow
def test_selection_positions_are_distinct_uniform_and_the_same_for_any_batch_of_edges() -> None:
    m, d, rounds = np.array([50, 7, 1000]), np.array([5, 7, 10]), 2000
    counts = np.zeros(50)
    for t in range(rounds):
        pos = selection_positions(3, np.array([4, 9, 11]), t, m, d, "cpu").numpy()
        parts = np.split(pos, np.cumsum(d)[:-1])
        for p, mm, dd in zip(parts, m, d, strict=True):
            assert len(set(p.tolist())) == dd and p.min() >= 0 and p.max() < mm
        assert sorted(parts[1].tolist()) == list(range(7))  # d = m: every coordinate
        alone = selection_positions(3, np.array([9]), t, m[1:2], d[1:2], "cpu").numpy()
        np.testing.assert_array_equal(alone, parts[1])
        counts[parts[0]] += 1
    # each coordinate drawn with probability d/m = 0.1: within 5 standard deviations
    sd = np.sqrt(rounds * 0.1 * 0.9)
    assert np.abs(counts - rounds * 0.1).max() < 5 * sd
    other = selection_positions(4, np.array([4]), 0, m[:1], d[:1], "cpu")
    assert not torch.equal(other, selection_positions(3, np.array([4]), 0, m[:1], d[:1], "cpu"))


@pytest.mark.parametrize("kind", ["orthonormal", "gaussian"])
def test_dense_maps_have_the_stated_rows(kind: str) -> None:
    s = dense_maps(kind, 0, np.arange(400), 5, 4, 20, "cpu").double()
    sts = (s.transpose(1, 2) @ s).mean(0)  # E[S^T S] = (d_e/d) I
    torch.testing.assert_close(sts, 0.2 * torch.eye(20, dtype=torch.float64), atol=0.03, rtol=0)
    if kind == "orthonormal":
        torch.testing.assert_close(s @ s.transpose(1, 2), torch.eye(4, dtype=torch.float64).expand(400, 4, 4))


@pytest.mark.parametrize("estimates", [False, True])
def test_redrawn_with_gamma_one_is_dfedu(estimates: bool) -> None:
    """``gamma = 1``: every round selects every coordinate (``S^T S = I``): dFedU's iterates."""
    sheaf = sim_of(gamma=1.0, estimates=estimates)
    dfedu = sim_of(algorithm="dfedu", maps="learned")
    for sim in (sheaf, dfedu):
        freeze_gradients(sim)
    for _ in range(3):
        sheaf.step()
        dfedu.step()
    for i in range(4):
        torch.testing.assert_close(sheaf.theta(i), dfedu.theta(i), rtol=1e-5, atol=1e-6)
    assert sheaf.transport.bits == dfedu.transport.bits


@pytest.mark.parametrize("kind", ["selection", "orthonormal", "gaussian"])
def test_estimates_converge_to_the_neighbours_models_when_training_stops(kind: str) -> None:
    sim = sim_of(map_kind=kind, estimates=True, gamma=0.5, lam=0.0)
    sim.ctx.gradient_source = lambda t: ([torch.zeros_like(x) for x in t], torch.zeros(4))
    first = thetas(sim)
    assert any(np.abs(v - first[j]).max() > 1e-3 for (_, j), v in copies(sim).items())
    for _ in range(80):
        sim.step()
    for (_, j), value in copies(sim).items():
        np.testing.assert_allclose(value, first[j], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["selection", "orthonormal", "gaussian"])
def test_both_ends_of_an_edge_hold_the_same_copies_and_the_coupling_is_zero_sum(kind: str) -> None:
    """The copy of ``theta_i`` that ``j`` holds equals ``i``'s own copy after rounds with clients
    sitting out (bit for bit with selections), so each edge's two pulls cancel."""
    sim = sim_of(map_kind=kind, estimates=True, drop_prob=0.3, lam=0.3, stability_check=False)
    sim.ctx.gradient_source = lambda t: ([torch.randn_like(x) for x in t], torch.zeros(4))
    for _ in range(7):
        sim.step()
    assert sim.transport.faults.dropped > 0  # clients sat rounds out
    held, own = copies(sim), copies(sim, own=True)
    assert held.keys() == own.keys()
    for (i, j), mine in own.items():
        assert np.abs(mine).max() > 0  # refreshed at least once
        if kind == "selection":
            np.testing.assert_array_equal(mine, held[j, i])
        else:
            np.testing.assert_allclose(mine, held[j, i], rtol=1e-5, atol=1e-6)
        pulls = (mine - held[i, j]) + (own[j, i] - held[j, i])  # i's and j's terms of the edge
        np.testing.assert_allclose(pulls, 0.0, atol=1e-5)


def test_estimates_with_too_large_a_consensus_step_are_refused_in_one_line() -> None:
    """``alpha lam lambda_max > 2p/(2-p)`` refused, naming the largest ``lam`` that passes; below
    it runs, and ``lam = null`` takes half of it."""
    cfg = RunConfig(**{**HOMOGENEOUS, "estimates": True, "gamma": 0.1, "alpha": 0.1})
    sim = build_simulation(cfg.replace(lam=0.0), graph=GRAPH)
    d = sim.ctx.fed.node_dims()[0]
    p = max(1, int(np.floor(0.1 * d))) / d
    top = float(nx.laplacian_spectrum(GRAPH.to_networkx()).max())
    limit = refresh_limit(p) / (0.1 * top)
    with pytest.raises(ConfigError, match=r"estimates refreshes.*use lam <= ") as err:
        build_simulation(cfg.replace(lam=1.05 * limit), graph=GRAPH)
    assert "\n" not in str(err.value) and f"{limit:.3g}" in str(err.value)
    build_simulation(cfg.replace(lam=0.95 * limit), graph=GRAPH)
    build_simulation(cfg.replace(lam=1.05 * limit, stability_check=False), graph=GRAPH)
    assert build_simulation(cfg.replace(lam=None), graph=GRAPH).config.lam == pytest.approx(limit / 2)


@pytest.mark.parametrize(("factor", "grows"), [(0.5, False), (4.0, True)])
def test_the_refresh_limit_separates_copies_that_settle_from_copies_that_drift(factor, grows) -> None:
    """The limit's derivation by hand, simulated: one edge, no gradients, each coordinate's copies
    refreshed with probability ``p`` a round and their difference re-applied every round; the
    models' difference shrinks below ``alpha lam = p/(2-p)`` (``lambda_max = 2``) and grows above."""
    rng = np.random.default_rng(0)
    p, coords, rounds = 0.05, 4000, 400
    a = factor * refresh_limit(p) / 2  # alpha lam, the edge's Laplacian having lambda_max = 2
    delta = rng.normal(size=coords)  # theta_i - theta_j per coordinate
    copies = np.zeros(coords)  # xhat_i - xhat_j, zero at the start
    for _ in range(rounds):
        fresh = rng.random(coords) < p
        copies[fresh] = delta[fresh]
        delta = delta - 2 * a * copies
    ratio = np.sqrt(np.mean(delta**2))
    assert (ratio > 10.0) if grows else (ratio < 0.1)


def test_feature_maps_equal_the_dense_feature_maps_scenario() -> None:
    """``maps = features`` (coordinates, never stored) against ``shared_feature_maps`` (dense fixed
    maps through Algorithm 1 with eta = 0): the same iterates and bits."""
    cfg = RunConfig(
        dataset="synthetic-clusters",
        clients=6,
        graph="complete",
        eta=0.0,
        lam=0.3,
        alpha=0.1,
        rounds=3,
        edge_weights="graph",
    )
    dense = shared_feature_maps(cfg, load_dataset(cfg), clusters_feature_sets(cfg.data, cfg.seed, 6))
    coords = build_simulation(cfg.replace(maps="features"))
    for _ in range(3):
        dense.step()
        coords.step()
    for i in range(6):
        torch.testing.assert_close(coords.theta(i), dense.theta(i), rtol=1e-5, atol=1e-6)
    assert coords.transport.bits == dense.transport.bits
    assert coords.evaluate()["sheaf_energy"] == pytest.approx(dense.evaluate()["sheaf_energy"], rel=1e-5)


def test_feature_and_aligned_supports_by_hand() -> None:
    # 2 outputs; client i sees features (0, 1, 2), j sees (5, 2, 1) in its column order
    fi, fj = np.array([0, 1, 2]), np.array([5, 2, 1])
    si, sj = feature_support(fi, fj, 2), feature_support(fj, fi, 2)
    # shared {1, 2}: W_i[:, 1], W_i[:, 2] per output (width 3), then b_i at 6, 7
    np.testing.assert_array_equal(si, [1, 2, 4, 5, 6, 7])
    np.testing.assert_array_equal(sj, [2, 1, 5, 4, 6, 7])  # j's columns of features 1, 2
    small, medium, large = (build_model(n, (1, 28, 28), 10) for n in ("cnn-small", "cnn-medium", "cnn-large"))
    a, b = aligned_support(small, medium)
    # conv 16x1x5x5 + 16 biases; output layer: 10 x (first 2304 inputs) + 10 biases
    assert len(a) == len(b) == 16 * 25 + 16 + 10 * 2304 + 10 == 23466
    a, b = aligned_support(small, large)  # 5x5 vs 3x3 kernels: the output layer's 10 x 120 + 10 only
    assert len(a) == len(b) == 10 * 120 + 10
    assert len(aligned_support(medium, medium)[0]) == sum(p.numel() for p in medium.parameters())


def image_dataset(clients: int, n: int = 8) -> FederatedDataset:
    rng = np.random.default_rng(0)
    splits = []
    for _ in range(clients):
        x, xt = rng.normal(size=(n, 1, 28, 28)).astype(np.float32), rng.normal(size=(4, 1, 28, 28))
        splits.append(ClientSplit(x, rng.integers(0, 10, n), xt.astype(np.float32), rng.integers(0, 10, 4)))
    return FederatedDataset("images", "classification", 10, tuple(splits))


def test_aligned_cnns_start_equal_on_their_shared_slices_and_couple_them() -> None:
    cfg = RunConfig(
        maps="aligned",
        model="cnn-small,cnn-medium",
        clients=4,
        graph="complete",
        batch_size=4,
        lam=0.5,
        local_epochs=0,  # one gradient step a round: the step below is alpha times the frozen gradient
    )
    sim = build_simulation(cfg, dataset=image_dataset(4))
    state = sim.state
    assert isinstance(state, CoordinateState) and state.support is not None
    a, b = aligned_support(*(c.module for c in sim.ctx.fed.cohorts))
    small, medium = sim.theta(0), sim.theta(1)  # round-robin: 0, 2 small; 1, 3 medium
    torch.testing.assert_close(small[a], medium[b])
    assert not torch.equal(small, medium[: len(small)])  # only the shared slices were aligned
    before = medium.clone()
    freeze = freeze_gradients(sim)
    sim.step()
    coupled = torch.zeros_like(before, dtype=torch.bool)
    coupled[b] = True
    step = sim.theta(1) - (before - cfg.alpha * freeze[1][0])
    assert step[~coupled].abs().max() < 1e-6  # the coupling moves only the shared coordinates
    # both directions of 4 small-medium edges and the small-small one; the medium-medium edge: all
    assert sorted(state.support.m.tolist()) == [len(a)] * 10 + [len(before)] * 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"maps": "learned", "estimates": True}, "estimates' = true needs maps=redrawn"),
        ({"maps": "learned", "map_kind": "gaussian"}, "map_kind' = gaussian applies to maps=redrawn"),
        ({"algorithm": "dfedu", "maps": "redrawn"}, "applies to algorithm=sheaf-fmtl only"),
        ({"maps": "redrawn", "topology": "conventional-fmtl"}, "is not allowed with it"),
    ],
)
def test_bad_combinations_are_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        RunConfig(**changes)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dataset": "synthetic", "maps": "features"}, "needs the ids of each client's feature columns"),
        ({"dataset": "synthetic-clusters", "maps": "aligned"}, "maps=aligned matches layers"),
        ({"dataset": "synthetic-clusters", "maps": "redrawn"}, "maps=redrawn couples whole models"),
    ],
)
def test_modes_that_do_not_fit_the_models_are_refused_before_training(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        build_simulation(RunConfig(clients=6, **changes))
    assert "\n" not in str(err.value)


def test_redrawn_run_records_bits_flops_and_the_estimates_memory(tmp_path) -> None:
    cfg = RunConfig(**{**HOMOGENEOUS, "rounds": 4, "eval_every": 2, "estimates": True})
    out = execute(cfg, tmp_path / "run")
    s = out.summary
    d = int(s["model_dims"][0])
    d_e = int(np.floor(0.2 * d))
    half_edges = 2 * s["num_edges"]
    assert s["transmitted_bits"] == 4 * half_edges * d_e * 32
    assert s["flops_sheaf"] == 4 * 2 * half_edges * d  # estimates: xhat_i - xhat_j summed per half-edge
    assert s["coupling_state_bytes"] == 2 * half_edges * d * 4  # both copies of every edge, at each end


def _disagreement_growth(cfg: RunConfig, rounds: int) -> float:
    """``||x(T) - mean|| / ||x(0) - mean||`` of the coupling alone (zero gradients) from random models."""
    sim = build_simulation(cfg.replace(stability_check=False))
    gen = torch.Generator().manual_seed(5)
    sim.state.thetas = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in sim.state.thetas]
    sim.ctx.gradient_source = lambda t: (
        [torch.zeros_like(x) for x in t],
        torch.zeros(sim.ctx.fed.num_clients),
    )

    def spread() -> float:
        x = torch.cat(sim.state.thetas)
        return float((x - x.mean(0)).norm())

    start = spread()
    for _ in range(rounds):
        sim.step()
    return spread() / start


@pytest.mark.parametrize("gamma", [0.02, 0.3])
def test_the_stability_check_of_redrawn_maps_refuses_where_the_coupling_grows(gamma: float) -> None:
    """The mean-square limit ``alpha lam lambda_S < 2``, ``lambda_S = 2 (1 - q) + q lambda_max(L)``
    (a dense numpy eigendecomposition gives ``lambda_max``): accepted at 0.9 of it, where the
    coupling alone shrinks the models' disagreement, refused at 1.3, where it grows; the graph
    Laplacian's worst case would refuse both at small ``gamma``."""
    cfg = RunConfig(
        dataset="synthetic",
        maps="redrawn",
        gamma=gamma,
        clients=12,
        graph="erdos-renyi",
        graph_p=0.4,
        alpha=0.1,
        rounds=400,
        edge_weights="graph",
    )
    probe = build_simulation(cfg.replace(lam=0.0))
    graph, d = probe.ctx.graph, int(probe.state.layout.node_dims[0])
    lap = np.diag(graph.degrees().astype(float))
    lap[graph.edges[:, 0], graph.edges[:, 1]] = lap[graph.edges[:, 1], graph.edges[:, 0]] = -1.0
    lmax, q = float(np.linalg.eigvalsh(lap).max()), max(1, int(gamma * d)) / d
    limit = 2.0 / (cfg.alpha * (2 * (1 - q) + q * lmax))
    accepted = build_simulation(cfg.replace(lam=0.9 * limit))
    assert accepted.state.lambda_max == pytest.approx(2 * (1 - q) + q * lmax)
    with pytest.raises(ConfigError, match="mean-square bound"):
        build_simulation(cfg.replace(lam=1.3 * limit))
    if gamma < 0.1:
        assert 0.9 * limit * cfg.alpha * lmax > 2  # the worst case would refuse the stable one
    assert _disagreement_growth(cfg.replace(lam=0.9 * limit), 300) < 0.5
    assert _disagreement_growth(cfg.replace(lam=1.3 * limit), 300) > 10.0


def test_selection_positions_hashed_in_chunks_equal_one_pass(monkeypatch) -> None:
    """``positions`` hashes a bounded chunk of elements at a time; any chunk size gives the same
    positions (here chunks of 7 elements, across edge boundaries, against one pass)."""
    from sheaf_fmtl.sheaf import selection

    m, d = np.array([50, 7, 1000, 33]), np.array([5, 7, 10, 4])
    whole = [selection_positions(3, np.arange(4) * 5, t, m, d, "cpu") for t in range(5)]
    monkeypatch.setattr(selection, "HASH_CHUNK", 7)
    draws = selection.SelectionDraws(3, np.arange(4) * 5, m, d, "cpu")
    for t, want in enumerate(whole):
        torch.testing.assert_close(draws.positions(t), want)
    twins = selection.SelectionDraws(
        3, np.repeat(np.arange(4) * 5, 2), np.repeat(m, 2), np.repeat(d, 2), "cpu"
    )
    pairs = twins.positions(2).split(np.repeat(d, 2).tolist())  # both half-edges of an edge: one draw
    for i, want in enumerate(whole[2].split(d.tolist())):
        torch.testing.assert_close(pairs[2 * i], want)
        torch.testing.assert_close(pairs[2 * i + 1], want)


def test_selection_positions_equal_the_formula_element_by_element() -> None:
    """Each position by hand from the class docstring's formula (a Python loop over edges and
    strata): rotation ``hash(key, 0) m >> 32``, stratum ``k``'s draw ``start_k + hash(key, k + 1)
    size_k >> 32``, modulo ``m``; edges of several ``(m, d)``, interleaved, and repeated."""
    from sheaf_fmtl.sheaf import selection

    edges = np.array([9, 2, 9, 40, 7, 2])
    m, d = np.array([50, 7, 50, 1000, 33, 7]), np.array([5, 7, 5, 10, 4, 3])
    for t in (0, 3):
        got = selection.SelectionDraws(11, edges, m, d, "cpu").positions(t).tolist()
        want = []
        for e, mm, dd in zip(edges.tolist(), m.tolist(), d.tolist(), strict=True):
            key = selection.edge_keys(11, torch.tensor([e]), t, stream=1)
            offset = int(selection.hash_uniform32(key, torch.tensor([0]))) * mm >> 32
            for k in range(dd):
                start, size = k * mm // dd, (k + 1) * mm // dd - k * mm // dd
                x = start + (int(selection.hash_uniform32(key, torch.tensor([k + 1]))) * size >> 32) + offset
                want.append(x % mm)
        assert got == want


def test_energy_of_redrawn_maps_by_groups_of_edges_equals_one_exchange(monkeypatch) -> None:
    """With redrawn supports whole models are compared a group of edges at a time; groups of one
    edge give the energy of one exchange of every model."""
    from sheaf_fmtl.algorithms.maps import coordinate_state

    sim = build_simulation(RunConfig(**{**HOMOGENEOUS, "maps": "redrawn", "rounds": 3}), graph=GRAPH)
    sim.step()
    whole = sim.evaluate()["sheaf_energy"]
    monkeypatch.setattr(coordinate_state, "ENERGY_CHUNK", 1)
    assert sim.evaluate()["sheaf_energy"] == pytest.approx(whole, rel=1e-12)
    assert whole > 0
