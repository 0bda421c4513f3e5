"""Lemma 1, symmetry/PSD and the kernel of the sheaf Laplacian against the dense oracle."""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sheaf_fmtl.reference.dense import dense_coboundary, dense_laplacian
from sheaf_fmtl.sheaf import ops
from sheaf_fmtl.sheaf.graph import ClientGraph, make_graph
from sheaf_fmtl.sheaf.layout import build_layout
from sheaf_fmtl.sheaf.maps import init_maps


def _setup(n: int, p: float, dims: list[int], gamma: float, seed: int, init: str = "gaussian"):
    graph = ClientGraph.from_networkx(nx.gnp_random_graph(n, p, seed=seed))
    # cohorts by dimension: clients of equal d share a cohort
    distinct = sorted(set(dims))
    cohort_of = [distinct.index(d) for d in dims]
    layout = build_layout(graph, dims, cohort_of, gamma)
    gen = torch.Generator().manual_seed(seed)
    maps = [m.double() for m in init_maps(layout, init, generator=gen)]
    thetas = [
        torch.randn(len(c), distinct[k], generator=gen, dtype=torch.float64)
        for k, c in enumerate(layout.cohorts)
    ]
    return graph, layout, maps, thetas


def _lookup(layout, maps):
    where = {}
    for b, m in zip(layout.buckets, maps, strict=True):
        for k, h in enumerate(b.half_edges.tolist()):
            where[(int(layout.graph.src[h]), int(layout.graph.dst[h]))] = m[k].numpy()
    return lambda i, j: where[(i, j)]


def _flat(layout, thetas) -> np.ndarray:
    return np.concatenate(
        [thetas[layout.cohort_of[i]][layout.position[i]].numpy() for i in range(layout.num_clients)]
    )


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 7),
    p=st.floats(0.2, 1.0),
    dims=st.lists(st.integers(1, 6), min_size=7, max_size=7),
    gamma=st.floats(0.05, 1.0),
    seed=st.integers(0, 10_000),
)
def test_lemma1_and_laplacian_against_dense_oracle(n, p, dims, gamma, seed):
    graph, layout, maps, thetas = _setup(n, p, dims[:n], gamma, seed)
    P = _lookup(layout, maps)
    delta = dense_coboundary(graph, layout.node_dims, layout.edge_dims, P)
    lap = dense_laplacian(graph, layout.node_dims, layout.edge_dims, P)
    theta = _flat(layout, thetas)
    # L built block by block from the paper's formula equals delta^T delta, and is symmetric PSD.
    np.testing.assert_allclose(lap, delta.T @ delta, atol=1e-9)
    np.testing.assert_allclose(lap, lap.T, atol=1e-12)
    assert np.linalg.eigvalsh(lap).min() > -1e-8 * max(1.0, np.abs(lap).max())
    # Lemma 1: theta^T L theta = sum_e ||P_ij theta_i - P_ji theta_j||^2 = energy on stacked state
    edge_sum = sum(
        float(np.sum((P(i, j) @ theta_i - P(j, i) @ theta_j) ** 2))
        for i, j in graph.edges.tolist()
        for theta_i, theta_j in [(_block(layout, theta, i), _block(layout, theta, j))]
    )
    quad = float(theta @ lap @ theta)
    np.testing.assert_allclose(quad, edge_sum, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(float(ops.energy(layout, thetas, maps)), quad, rtol=1e-9, atol=1e-9)
    # The stacked Laplacian action equals the dense matrix-vector product.
    action = ops.laplacian_action(layout, thetas, maps)
    np.testing.assert_allclose(_flat(layout, action), lap @ theta, rtol=1e-9, atol=1e-9)


def _block(layout, theta: np.ndarray, i: int) -> np.ndarray:
    start = int(layout.node_dims[:i].sum())
    return theta[start : start + int(layout.node_dims[i])]


def test_kernel_of_identity_sheaf_is_the_equal_vectors():
    graph = make_graph("erdos-renyi", 6, p=0.5, seed=3)
    d = 3
    layout = build_layout(graph, [d] * 6, [0] * 6, 1.0)
    maps = [m.double() for m in init_maps(layout, "identity", generator=torch.Generator())]
    lap = dense_laplacian(graph, layout.node_dims, layout.edge_dims, _lookup(layout, maps))
    eig, vec = np.linalg.eigh(lap)
    null = vec[:, np.abs(eig) < 1e-9]
    assert null.shape[1] == d  # exactly the global sections
    consensus = np.tile(np.eye(d), (6, 1)) / np.sqrt(6)
    # the null space equals the span of the "all clients equal" vectors
    np.testing.assert_allclose(null @ null.T, consensus @ consensus.T, atol=1e-9)
    # and a non-consensus vector is not in it
    theta = torch.randn(1, 6, d, dtype=torch.float64)[0]
    assert float(ops.energy(layout, [theta], maps)) > 1e-6


def test_energy_is_zero_on_global_sections_of_a_random_sheaf():
    """Messages that agree on every edge (a global section) give zero energy and L theta = 0."""
    graph = make_graph("complete", 2)
    layout = build_layout(graph, [4, 4], [0, 0], 0.5)
    maps = [m.double() for m in init_maps(layout, "gaussian", generator=torch.Generator().manual_seed(1))]
    p01, p10 = maps[0][0], maps[0][1]
    theta0 = torch.randn(4, dtype=torch.float64)
    # choose theta1 with P10 theta1 = P01 theta0 (least-squares solve is exact: P10 has full row rank)
    theta1 = torch.linalg.lstsq(p10, p01 @ theta0).solution
    thetas = [torch.stack([theta0, theta1])]
    assert float(ops.energy(layout, thetas, maps)) < 1e-18
    assert float(ops.laplacian_action(layout, thetas, maps)[0].abs().max()) < 1e-9
