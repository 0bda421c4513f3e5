"""The paper's special cases as CLI topologies (``sheaf_fmtl.scenarios``), weighted conventional FMTL
against weighted dFedU, and the Simulation accessors ``theta(i)`` / ``maps()``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms import ALGORITHMS, Algorithm
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.synthetic import clusters_feature_sets
from sheaf_fmtl.scenarios import build_topology, weighted_fmtl
from sheaf_fmtl.sheaf import ops
from sheaf_fmtl.sheaf.graph import ClientGraph, half_edge_matrix

from .._baselines_problems import config, federation, regression_dataset, simulation

WEIGHTS = np.array([0.5, 2.0, 1.5, 0.25])  # a_ij of the edges below, in sorted edge order
EDGES = np.array([[0, 1], [0, 3], [1, 2], [2, 3]])


@pytest.mark.parametrize("local_steps", [1, 2])
def test_sqrt_weight_identity_maps_give_weighted_dfedu_iterates(local_steps: int) -> None:
    """``P_ij = I`` on a weighted graph, acting as ``sqrt(a_ij) I``: the same thetas as dFedU with
    ``a_ij``, round by round, and the same objective (paper eq. (9) ``conventional FMTL objective``)."""
    fed = federation(regression_dataset(sizes=(9, 12, 10, 7)))
    graph = ClientGraph(4, EDGES, WEIGHTS)
    common = {"batch_size": 4, "lam": 0.3, "local_steps": local_steps}
    sheaf = weighted_fmtl(config("sheaf-fmtl", **common), fed, graph)
    dfedu = simulation("dfedu", fed, graph, **common)
    maps = sheaf.maps()
    norms = half_edge_matrix(sheaf.algorithm.checkpoint(sheaf.state, sheaf.ctx)["map_norms"], graph.edges, 4)
    for (i, j), a in zip(EDGES.tolist(), WEIGHTS.tolist(), strict=True):
        eye = torch.eye(maps[(i, j)].shape[1])
        torch.testing.assert_close(maps[(i, j)], eye)
        torch.testing.assert_close(maps[(j, i)], eye)
        assert float(norms[i, j]) == pytest.approx((a * len(eye)) ** 0.5)  # ||sqrt(a_ij) I||_F
    for k in range(4):
        sheaf.step()
        dfedu.step()
        torch.testing.assert_close(sheaf.state.thetas[0], dfedu.state.thetas[0], msg=f"round {k + 1}")
    unweighted = simulation("dfedu", fed, ClientGraph(4, EDGES), **common)
    for _ in range(4):
        unweighted.step()
    assert not torch.allclose(unweighted.state.thetas[0], dfedu.state.thetas[0])  # weights matter
    assert sheaf.algorithm.penalty(sheaf.state, sheaf.ctx) == pytest.approx(
        dfedu.algorithm.penalty(dfedu.state, dfedu.ctx), rel=1e-5
    )


def test_simulation_accessors_read_client_order_from_the_stacks() -> None:
    """``theta(i)`` and ``maps()`` against the stacked state, clients in two cohorts."""
    fed = federation(regression_dataset(features=(3, 5, 3)))
    sim = simulation("sheaf-fmtl", fed)
    for i in range(3):
        c, row = int(fed.cohort_of[i]), int(fed.position[i])
        assert sim.theta(i).data_ptr() == sim.state.thetas[c][row].data_ptr()
        assert sim.theta(i).shape == (int(fed.node_dims()[i]),)
    maps = sim.maps()
    assert sorted(maps) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    layout, g = sim.state.layout, sim.ctx.graph
    sent = ops.messages(layout, sim.state.thetas, sim.state.store)  # the kernel's P_ij theta_i
    for h in range(g.num_half_edges):  # each message segment is maps()[(i, j)] @ theta(i)
        i, j, q = int(g.src[h]), int(g.dst[h]), int(layout.slot[h])
        start, size = int(layout.messages.offsets[q]), int(layout.messages.sizes[q])
        torch.testing.assert_close(sent[start : start + size], maps[(i, j)] @ sim.theta(i))
    local = simulation("local", fed)
    assert local.maps() == {}


def test_every_registered_algorithm_is_an_algorithm_subclass() -> None:
    names = {"sheaf-fmtl", "local", "dfedu", "dpsgd", "fedavg", "ditto", "pfedme", "perfedavg"}
    assert names <= set(ALGORITHMS)
    assert all(Algorithm in getattr(cls, "__mro__", ()) for cls in ALGORITHMS.values())  # explicit subclasses


def _clusters(**overrides: object) -> RunConfig:
    base: dict[str, object] = {
        "dataset": "synthetic-clusters",
        "clients": 6,
        "rounds": 2,
        "batch_size": 8,
        "lam": 0.1,
        "data": {"min_samples": 10, "max_samples": 12, "test_samples": 8},
    }
    return RunConfig().replace(**{**base, **overrides})


def test_personalised_fl_topology_adds_a_dataless_server_with_identity_maps() -> None:
    sim = build_topology(
        _clusters(
            topology="personalised-fl",
            data={"min_samples": 10, "max_samples": 12, "test_samples": 8, "homogeneous": True},
        )
    )
    assert (sim.config.eta, sim.config.gamma, sim.config.algorithm) == (0.0, 1.0, "sheaf-fmtl")
    assert sim.ctx.graph.num_nodes == 7 and sim.ctx.graph.degrees().tolist() == [6] + [1] * 6
    assert int(sim.ctx.fed.cohorts[0].n_train[0]) == 0  # node 0: no data
    for p in sim.maps().values():
        torch.testing.assert_close(p, torch.eye(p.shape[0]))
    sim.step()
    assert sim.evaluate()["per_client"][0] is None


def test_hybrid_fl_topology_selects_each_clients_features_from_the_server_model() -> None:
    cfg = _clusters(topology="hybrid-fl")
    sim = build_topology(cfg)
    features = clusters_feature_sets(cfg.data, cfg.seed, cfg.clients)
    classes = 2
    server = sim.theta(0)
    assert server.shape == (classes * 25,)  # all 24 features and the bias, per class
    w0 = server[: classes * 24].view(classes, 24)
    b0 = server[classes * 24 :]
    maps = sim.maps()
    for i, f in enumerate(features, start=1):
        expect = torch.cat([w0[:, torch.as_tensor(f)].reshape(-1), b0])  # Pi_i theta_0 by hand
        torch.testing.assert_close(maps[(0, i)] @ server, expect)
        torch.testing.assert_close(maps[(i, 0)], torch.eye(len(expect)))
    sim.step()
    assert np.isfinite(sim.evaluate()["test_metric"])


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"topology": "hybrid-fl", "dataset": "synthetic"}, "synthetic-clusters"),
        ({"topology": "personalised-fl", "algorithm": "dfedu"}, "algorithm=dfedu"),
    ],
)
def test_topologies_refuse_configs_that_do_not_fit(overrides: dict, words: str) -> None:
    cfg = _clusters(**overrides) if overrides.get("dataset") is None else RunConfig().replace(**overrides)
    with pytest.raises(ConfigError, match=words):
        build_topology(cfg)


def test_unknown_topology_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match="topology"):
        RunConfig().replace(topology="ring-fl")
