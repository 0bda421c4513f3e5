"""The graph Laplacian ``L = D - A`` (weights ``a_ij``) as a sparse matrix, and its largest eigenvalue
``lambda_max(L)``, which bounds the coupling step of dFedU, D-PSGD and the sheaf modes (``alpha lam
lambda_max < 2``). Up to :data:`DENSE_UP_TO` clients the whole spectrum is computed (LAPACK, as
``networkx.laplacian_spectrum`` does); above, Lanczos iterations on the sparse matrix
(``scipy.sparse.linalg.eigsh``) from a fixed start vector, so the cost grows with the edges, not
with ``N^3``, and a seed gives the same number on every run."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

from .graph import ClientGraph

#: Clients up to which ``lambda_max`` comes from the dense spectrum (an ``N x N`` matrix).
DENSE_UP_TO = 1000


def graph_laplacian(graph: ClientGraph) -> scipy.sparse.csr_array:
    """``L = D - A`` of the weighted graph, ``[N, N]`` sparse (``2E + N`` stored entries)."""
    assert graph.weights is not None
    a = graph.half_edge_weights()
    adjacency = scipy.sparse.csr_array((a, (graph.src, graph.dst)), shape=(graph.num_nodes,) * 2)
    degree = np.bincount(graph.src, weights=a, minlength=graph.num_nodes)
    return (scipy.sparse.diags_array(degree) - adjacency).tocsr()


def graph_lambda_max(graph: ClientGraph, dense_up_to: int = DENSE_UP_TO) -> float:
    """``lambda_max(L)`` of the weighted graph Laplacian (0 without edges), computed once per graph.

    Dense (``scipy.linalg.eigvalsh``) up to ``dense_up_to`` clients; above, ``eigsh(L, k=1,
    which="LA")`` to a relative tolerance of ``1e-10`` from the start vector ``1 + (i mod 7)/7``
    (deterministic, and not orthogonal to the top eigenvector of a connected graph's Laplacian
    in practice); a Lanczos run that does not converge falls back to the bound ``max_(i~j) (d_i +
    d_j)`` (Anderson and Morley, 1985), which is never below ``lambda_max``."""
    key = f"lambda_max, dense up to {dense_up_to}"
    if key in graph.cache:
        return float(graph.cache[key])
    if graph.num_edges == 0:
        value = 0.0
    elif graph.num_nodes <= dense_up_to:
        value = float(scipy.linalg.eigvalsh(graph_laplacian(graph).toarray())[-1])
    else:
        value = _lanczos(graph)
    graph.cache[key] = value
    return value


def _lanczos(graph: ClientGraph) -> float:
    laplacian = graph_laplacian(graph)
    start = 1.0 + (np.arange(graph.num_nodes) % 7) / 7.0
    try:
        top = scipy.sparse.linalg.eigsh(laplacian, k=1, which="LA", v0=start, tol=1e-10, maxiter=5000)
        return float(top[0][0])
    except scipy.sparse.linalg.ArpackNoConvergence:
        degree = laplacian.diagonal()
        return float((degree[graph.edges[:, 0]] + degree[graph.edges[:, 1]]).max())
