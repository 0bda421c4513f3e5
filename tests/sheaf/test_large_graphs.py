"""Graphs at scale: drawn in O(N + E) above LARGE_GRAPH clients with their components joined, the
mean-degree key, and lambda_max of the Laplacian by Lanczos against the dense spectrum."""

import networkx as nx
import numpy as np
import pytest

from sheaf_fmtl.sheaf.graph import LARGE_GRAPH, ClientGraph, GraphError, join_components, make_graph
from sheaf_fmtl.sheaf.spectrum import graph_lambda_max, graph_laplacian


def _dense_lambda_max(graph: ClientGraph) -> float:
    return float(nx.laplacian_spectrum(graph.to_networkx()).max())  # the oracle: NetworkX, dense


def test_laplacian_matches_networkx_weighted():
    rng = np.random.default_rng(0)
    g = make_graph("erdos-renyi", 30, p=0.2, seed=3)
    weighted = ClientGraph(g.num_nodes, g.edges, rng.uniform(0.1, 3.0, g.num_edges))
    want = nx.laplacian_matrix(weighted.to_networkx(), nodelist=range(30)).toarray()
    np.testing.assert_allclose(graph_laplacian(weighted).toarray(), want)


@pytest.mark.parametrize("weighted", [False, True])
def test_lanczos_lambda_max_matches_dense_spectrum(weighted):
    g = make_graph("erdos-renyi", 300, degree=6, seed=1)
    if weighted:
        g = ClientGraph(g.num_nodes, g.edges, np.random.default_rng(1).uniform(0.2, 2.0, g.num_edges))
    want = _dense_lambda_max(g)
    assert graph_lambda_max(g) == pytest.approx(want, rel=1e-12)  # the dense path
    fresh = ClientGraph(g.num_nodes, g.edges, g.weights)
    assert graph_lambda_max(fresh, dense_up_to=10) == pytest.approx(want, rel=1e-8)  # Lanczos


def test_lambda_max_is_cached_and_zero_without_edges():
    g = make_graph("erdos-renyi", 40, p=0.3, seed=0)
    first = graph_lambda_max(g)
    g.cache["lambda_max, dense up to 1000"] = -1.0  # a cached value is not recomputed
    assert graph_lambda_max(g) == -1.0 and first > 0
    assert graph_lambda_max(ClientGraph(3, np.zeros((0, 2), np.int64))) == 0.0


def test_join_components_links_each_small_component_to_the_largest():
    # components {0,1,2,3}, {4,5}, {6}, {7,8}: three joining edges, each into {0..3}
    edges = np.array([[0, 1], [1, 2], [2, 3], [4, 5], [7, 8]])
    joined = join_components(ClientGraph(9, edges), seed=5)
    assert joined.is_connected() and joined.joined_edges == 3
    new = {tuple(e) for e in joined.edges.tolist()} - {tuple(e) for e in edges.tolist()}
    assert len(new) == 3
    assert all(min(e) in (4, 6, 7) or max(e) in (4, 6, 7) for e in new)  # each component's lowest client
    assert all(len({*e} & {0, 1, 2, 3}) == 1 for e in new)
    again = join_components(ClientGraph(9, edges), seed=5)
    np.testing.assert_array_equal(again.edges, joined.edges)  # the seed fixes the joins
    connected = ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3]]))
    assert join_components(connected, seed=0) is connected


def test_large_erdos_renyi_is_drawn_once_connected_with_the_mean_degree():
    n = LARGE_GRAPH + 2000
    g = make_graph("erdos-renyi", n, degree=4, seed=7)  # at degree 4, ~ n e^-4 = 55 isolated clients
    assert g.is_connected() and g.joined_edges > 10
    assert 2 * g.num_edges / n == pytest.approx(4, abs=0.25)
    again = make_graph("erdos-renyi", n, degree=4, seed=7)
    np.testing.assert_array_equal(g.edges, again.edges)
    assert not np.array_equal(make_graph("erdos-renyi", n, degree=4, seed=8).edges, g.edges)


def test_small_graphs_keep_the_quadratic_sampler_and_redraws():
    g = make_graph("erdos-renyi", 50, p=0.2, seed=0)
    want = nx.gnp_random_graph(50, 0.2, seed=0)
    assert nx.is_connected(want) and g.joined_edges == 0
    assert {tuple(e) for e in g.edges.tolist()} == {tuple(sorted(e)) for e in want.edges}
    assert make_graph("erdos-renyi", 50, degree=9.8, seed=0).num_edges == g.num_edges  # p = 9.8 / 49


def test_graph_degree_out_of_range_is_refused():
    with pytest.raises(GraphError, match="graph_degree = 12 on 10 clients"):
        make_graph("erdos-renyi", 10, degree=12, seed=0)


def test_components_labels_every_client():
    g = ClientGraph(5, np.array([[0, 1], [3, 4]]))
    labels = g.components()
    assert labels[0] == labels[1] and labels[3] == labels[4] and len(set(labels.tolist())) == 3
    assert not g.is_connected()
