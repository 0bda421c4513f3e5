"""Learned and fixed maps on a weighted graph: each edge's terms scaled by ``a_ij`` (maps acting as
``sqrt(a_ij) P_ij``, the dFedU special case), against the per-edge loop reference and dense
constructions of the weighted coboundary and Laplacian."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.reference import loop as ref
from sheaf_fmtl.reference.dense import dense_coboundary, dense_laplacian
from sheaf_fmtl.sheaf.graph import ClientGraph, half_edge_matrix
from sheaf_fmtl.sheaf.stability import laplacian_lambda_max
from tests._baselines_problems import federation, regression_dataset, simulation

EDGES = np.array([[0, 1], [0, 3], [1, 2], [1, 3], [2, 3]])
WEIGHTS = np.array([0.5, 2.0, 1.5, 0.25, 3.0])
WEIGHTED, UNWEIGHTED = ClientGraph(4, EDGES, WEIGHTS), ClientGraph(4, EDGES)


def _fed():  # noqa: ANN202
    return federation(regression_dataset(sizes=(9, 12, 10, 7), features=(3, 5, 3, 4)))


def _maps(sim) -> dict[tuple[int, int], np.ndarray]:  # noqa: ANN001
    return {k: v.double().numpy() for k, v in sim.maps().items()}


@pytest.mark.parametrize("mode", ["literal", "compact"])
@pytest.mark.parametrize("eta", [0.0, 0.05])
def test_weighted_rounds_equal_the_per_edge_reference(mode: str, eta: float) -> None:
    """Theta step ``a_ij P_ij^T r_ij`` and map step ``eta lam a_ij r_ij theta_i^T``, round by round."""
    sim = simulation(
        "sheaf-fmtl", _fed(), WEIGHTED, eta=eta, gamma=0.6, message_mode=mode, local_epochs=0, map_scale=1.0
    )
    before = ref.from_simulation(sim)
    assert before.weights[(1, 0)] == 0.5 and before.weights[(3, 2)] == 3.0
    result = ref.check_against_library(sim, rounds=4)
    assert result.ok, result
    if eta > 0:  # the maps moved, so the weighted map step was compared
        after = ref.from_simulation(sim)
        assert max(float((after.maps[k] - p).abs().max()) for k, p in before.maps.items()) > 1e-4


def test_weights_change_the_iterates_and_unit_weights_do_not() -> None:
    kw = dict(eta=0.05, gamma=0.6, local_epochs=0, map_scale=1.0)
    runs = [simulation("sheaf-fmtl", _fed(), g, **kw) for g in (WEIGHTED, UNWEIGHTED)]
    ones = simulation("sheaf-fmtl", _fed(), ClientGraph(4, EDGES, np.ones(len(EDGES))), **kw)
    for _ in range(3):
        for s in (*runs, ones):
            s.step()
    assert not torch.allclose(runs[0].state.thetas[0], runs[1].state.thetas[0])
    for a, b in zip(ones.state.thetas, runs[1].state.thetas, strict=True):
        assert torch.equal(a, b)  # a_ij = 1 everywhere: the unweighted numbers, bit for bit


def test_weighted_energy_and_map_norms_equal_the_dense_coboundary() -> None:
    sim = simulation("sheaf-fmtl", _fed(), WEIGHTED, eta=0.05, gamma=0.6, local_epochs=0, map_scale=1.0)
    sim.step()
    maps, dims = _maps(sim), sim.ctx.fed.node_dims()
    delta = dense_coboundary(WEIGHTED, dims, sim.state.layout.edge_dims, lambda i, j: maps[(i, j)], True)
    theta = np.concatenate([sim.theta(i).double().numpy() for i in range(4)])
    energy = float(np.sum((delta @ theta) ** 2))
    assert sim.evaluate()["sheaf_energy"] == pytest.approx(energy, rel=1e-5)
    norms = half_edge_matrix(sim.algorithm.checkpoint(sim.state, sim.ctx)["map_norms"], WEIGHTED.edges, 4)
    for (i, j), a in zip(EDGES.tolist(), WEIGHTS.tolist(), strict=True):
        assert float(norms[i, j]) == pytest.approx(np.sqrt(a) * np.linalg.norm(maps[(i, j)]), rel=1e-5)
        assert float(norms[j, i]) == pytest.approx(np.sqrt(a) * np.linalg.norm(maps[(j, i)]), rel=1e-5)


def test_start_up_check_uses_the_weighted_laplacian() -> None:
    sim = simulation("sheaf-fmtl", _fed(), WEIGHTED, gamma=0.6, map_scale=1.0, local_epochs=0)
    maps, dims, edge_dims = _maps(sim), sim.ctx.fed.node_dims(), sim.state.layout.edge_dims
    lap = dense_laplacian(WEIGHTED, dims, edge_dims, lambda i, j: maps[(i, j)], True)
    delta = dense_coboundary(WEIGHTED, dims, edge_dims, lambda i, j: maps[(i, j)], True)
    np.testing.assert_allclose(lap, delta.T @ delta, atol=1e-10)  # the two dense routes agree
    exact = float(np.linalg.eigvalsh(lap)[-1])
    plain = dense_laplacian(WEIGHTED, dims, edge_dims, lambda i, j: maps[(i, j)])  # a_ij ignored
    plain = float(np.linalg.eigvalsh(plain)[-1])
    assert abs(exact - plain) > 0.05 * exact  # the weights matter for this check
    state = sim.state
    estimate = laplacian_lambda_max(state.layout, state.thetas, state.store, iters=300, weights=state.weights)
    assert estimate == pytest.approx(exact, rel=1e-3)
    assert state.lambda_max == pytest.approx(exact, rel=0.2)  # the start-up estimate, 30 iterations


def test_weighted_epoch_round_is_local_pass_then_coupling_with_the_dense_weighted_laplacian() -> None:
    """Fixed maps, ``local_epochs = 1``: after the local pass, ``theta - alpha lam L_a theta``."""
    fed = _fed()
    kw = dict(eta=0.0, gamma=0.6, local_epochs=1, batch_size=4, map_scale=1.0, alpha=0.1, lam=0.2)
    sim = simulation("sheaf-fmtl", fed, WEIGHTED, **kw)
    loc = simulation("local", fed, WEIGHTED, **kw)
    maps = _maps(sim)
    sim.step()
    loc.step()
    trained = np.concatenate([loc.theta(i).double().numpy() for i in range(4)])
    edge_dims = sim.state.layout.edge_dims
    lap = dense_laplacian(WEIGHTED, fed.node_dims(), edge_dims, lambda i, j: maps[(i, j)], True)
    got = np.concatenate([sim.theta(i).double().numpy() for i in range(4)])
    np.testing.assert_allclose(got, trained - 0.1 * 0.2 * lap @ trained, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # starts two Gloo ranks: about 20 s
def test_two_processes_match_one_on_a_weighted_graph(tmp_path) -> None:  # noqa: ANN001
    """Each rank scales the half-edges it holds by their ``a_ij``: the same numbers as one process."""
    from tests.runtime.test_distributed import TINY, _compare

    edges = tmp_path / "edges.txt"
    lines = [f"{i} {(i + 1) % 7} {0.5 + 0.25 * i}" for i in range(7)] + ["0 3 2.0", "2 5 0.75"]
    edges.write_text("\n".join(lines) + "\n")
    tiny = {k: v for k, v in TINY.items() if k != "graph_p"}
    settings = {
        "algorithm": "sheaf-fmtl",
        "maps": "learned",
        "dataset": "synthetic-hetero",
        "graph": "file",
        **tiny,
    }
    _compare(tmp_path, {**settings, "graph_file": str(edges), "message_mode": "literal"}, 2)
