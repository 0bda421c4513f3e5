"""Graphs on small inputs (the generators seeded and connected, edge-list files) and the
edge-stalk rule."""

from __future__ import annotations

import numpy as np
import pytest

from sheaf_fmtl.sheaf.graph import GraphError, make_graph
from sheaf_fmtl.sheaf.stalks import edge_dim


@pytest.mark.parametrize("kind", ["erdos-renyi", "watts-strogatz", "barabasi-albert", "complete", "star"])
def test_graphs_are_connected_seeded_and_have_consistent_half_edges(kind):
    a = make_graph(kind, 15, p=0.2, k=4, m=2, seed=5)
    b = make_graph(kind, 15, p=0.2, k=4, m=2, seed=5)
    assert a.is_connected() and np.array_equal(a.edges, b.edges)
    assert np.array_equal(a.src[a.rev], a.dst) and np.array_equal(a.rev[a.rev], np.arange(a.num_half_edges))
    assert (a.edges[:, 0] < a.edges[:, 1]).all()


def test_erdos_renyi_differs_between_seeds_and_redraws_when_disconnected():
    assert not np.array_equal(
        make_graph("erdos-renyi", 20, p=0.3, seed=1).edges, make_graph("erdos-renyi", 20, p=0.3, seed=2).edges
    )
    g = make_graph("erdos-renyi", 20, p=0.12, seed=0)  # often disconnected on a first draw
    assert g.is_connected()
    with pytest.raises(GraphError, match="disconnected in all"):
        make_graph("erdos-renyi", 30, p=0.01, seed=0, max_tries=5)


def test_edge_list_file(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("# ring\n0 1\n1 2\n2 3\n3 0\n")
    g = make_graph("file", 4, path=f)
    assert g.num_edges == 4 and g.neighbors(0) == [1, 3]
    f.write_text("0 1\n2 3\n")
    with pytest.raises(GraphError, match="not connected"):
        make_graph("file", 4, path=f)
    f.write_text("0 9\n")
    with pytest.raises(GraphError, match="node ids"):
        make_graph("file", 4, path=f)


def test_edge_dim_rule():
    assert edge_dim(0.29, 100, 200) == 29
    assert edge_dim(0.01, 50, 70) == 1  # at least 1
    assert edge_dim(1.0, 7, 5) == 5
