"""Edge lists with weights and their errors; the weights ``a_ij`` in dFedU (paper, "Special Cases":
the conventional FMTL objective, eq. (9), ``lam/2 sum a_ij ||theta_i - theta_j||^2``) against a hand-built
weighted-Laplacian step; D-PSGD ignores them with a warning."""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pytest

from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.sheaf.graph import ClientGraph, GraphError, make_graph

from .._baselines_problems import client_arrays, federation, grads, regression_dataset, simulation, thetas_np

ALPHA, LAM = 0.05, 0.1
DATA = regression_dataset()
XY = client_arrays(DATA)
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _edges(tmp_path, text: str) -> ClientGraph:
    f = tmp_path / "g.txt"
    f.write_text(text)
    return make_graph("file", 4, path=f)


def test_three_column_edge_list_gives_weights_in_edge_order(tmp_path):
    g = _edges(tmp_path, "# weighted ring\n2 1 0.5\n0 1\n3, 2, 2.5\n0 3 4\n")
    np.testing.assert_array_equal(g.edges, [[0, 1], [0, 3], [1, 2], [2, 3]])
    np.testing.assert_array_equal(g.weights, [1.0, 4.0, 0.5, 2.5])
    np.testing.assert_array_equal(g.half_edge_weights(), [1, 1, 4, 4, 0.5, 0.5, 2.5, 2.5])
    assert g.weighted and not _edges(tmp_path, "0 1\n1 2\n2 3\n").weighted
    back = ClientGraph.from_networkx(g.to_networkx())
    np.testing.assert_array_equal(back.weights, g.weights)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("0 1\n1 1\n", 2, "self-loop 1 1"),
        ("0 1\n# c\n1 2 0\n", 3, "must be positive and finite, got 0"),
        ("0 1 -2\n", 1, "must be positive and finite, got -2"),
        ("0 1 nan\n", 1, "must be positive and finite, got nan"),
        ("0 1 inf\n", 1, "must be positive and finite, got inf"),
        ("0 1 heavy\n", 1, "weight 'heavy' is not a number"),
        ("0 1 2 3\n", 1, "expected 'i j' or 'i j weight'"),
        ("0 1\n1 2\n1 0 3\n", 3, "edge 1 0 repeats line 1"),
    ],
)
def test_edge_list_errors_name_file_and_line(tmp_path, text, line, words):
    with pytest.raises(GraphError) as e:
        _edges(tmp_path, text)
    assert str(e.value).startswith(f"{tmp_path / 'g.txt'}:{line}: ") and words in str(e.value), str(e.value)


def test_client_graph_rejects_bad_weights():
    with pytest.raises(GraphError, match="positive and finite"):
        ClientGraph(2, np.array([[0, 1]]), np.array([0.0]))
    with pytest.raises(GraphError, match="1 edge weights for 2 edges"):
        ClientGraph(3, np.array([[0, 1], [1, 2]]), np.array([1.0]))


def _weighted_path() -> tuple[ClientGraph, np.ndarray]:
    a = np.array([[0, 2.0, 0], [2.0, 0, 0.5], [0, 0.5, 0]])
    return ClientGraph(3, np.array([[1, 2], [0, 1]]), np.array([0.5, 2.0])), a


def test_dfedu_uses_edge_weights_as_a_ij():
    graph, a = _weighted_path()
    sim = simulation("dfedu", federation(DATA), graph, alpha=ALPHA, lam=LAM, local_steps=2)
    x = thetas_np(sim)
    sim.step()
    lap = np.diag(a.sum(1)) - a  # the weighted graph Laplacian, built by hand
    t = x.copy()
    for _ in range(2):  # the received models stay those sent at the start of the round
        coupling = a.sum(1, keepdims=True) * t - a @ x
        t = t - ALPHA * (grads(t, XY) + LAM * coupling)
    np.testing.assert_allclose(thetas_np(sim), t, **TOL)
    direct = 2.0 * ((t[0] - t[1]) ** 2).sum() + 0.5 * ((t[1] - t[2]) ** 2).sum()
    assert direct == pytest.approx(np.trace(t.T @ lap @ t), rel=1e-9)
    pen, energy = sim.algorithm.penalty(sim.state, sim.ctx)
    assert energy == pytest.approx(direct, rel=1e-5) and pen == pytest.approx(0.5 * LAM * direct, rel=1e-5)


def test_dfedu_stability_check_sees_the_weighted_laplacian():
    heavy = ClientGraph(3, np.array([[0, 1], [1, 2]]), np.array([200.0, 200.0]))  # lambda_max = 600
    assert max(nx.laplacian_spectrum(heavy.to_networkx())) == pytest.approx(600.0)
    with pytest.raises(ConfigError, match="3 >= 2"):
        simulation("dfedu", federation(DATA), heavy, alpha=ALPHA, lam=LAM)


def test_dpsgd_ignores_weights_with_a_warning():
    graph, _ = _weighted_path()
    with pytest.warns(UserWarning, match="dpsgd ignores the graph's edge weights"):
        weighted = simulation("dpsgd", federation(DATA), graph, alpha=ALPHA)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = simulation("dpsgd", federation(DATA), ClientGraph(3, graph.edges), alpha=ALPHA)
    weighted.step()
    plain.step()
    np.testing.assert_array_equal(thetas_np(weighted), thetas_np(plain))
