"""Naive dense coboundary and sheaf Laplacian, built entry by entry: the TEST ORACLE only.

Orientation: ``e^+ = max(i, j)``, ``e^- = min(i, j)``; ``delta(theta)_e = P_{e+} theta_{e+} -
P_{e-} theta_{e-}`` (paper, coboundary definition); ``L = delta^T delta``. Edge weights ``a_e``
(a weighted graph) scale edge ``e``'s rows of ``delta`` by ``sqrt(a_e)`` and its blocks of ``L`` by
``a_e`` (maps ``sqrt(a_e) P``, the dFedU special case).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..sheaf.graph import ClientGraph

MapLookup = Callable[[int, int], np.ndarray]  # (i, j) -> P_ij as a dense [d_ij, d_i] array


def _weights(graph: ClientGraph, weighted: bool) -> list[float]:
    if not weighted or graph.weights is None:
        return [1.0] * graph.num_edges
    return [float(a) for a in graph.weights.tolist()]


def dense_coboundary(
    graph: ClientGraph, node_dims: np.ndarray, edge_dims: np.ndarray, P: MapLookup, weighted: bool = False
) -> np.ndarray:
    col = np.concatenate([[0], np.cumsum(node_dims)])
    row = np.concatenate([[0], np.cumsum(edge_dims)])
    delta = np.zeros((int(row[-1]), int(col[-1])))
    for e, ((lo, hi), a) in enumerate(zip(graph.edges.tolist(), _weights(graph, weighted), strict=True)):
        rs = slice(row[e], row[e + 1])
        delta[rs, col[hi] : col[hi + 1]] += np.sqrt(a) * P(hi, lo)
        delta[rs, col[lo] : col[lo + 1]] -= np.sqrt(a) * P(lo, hi)
    return delta


def dense_laplacian(
    graph: ClientGraph, node_dims: np.ndarray, edge_dims: np.ndarray, P: MapLookup, weighted: bool = False
) -> np.ndarray:
    """``L_F`` block by block from the paper's formula: ``L_ii = sum_j a_ij P_ij^T P_ij``,
    ``L_ji = -a_ij P_ji^T P_ij`` for an edge ``{i, j}`` (independent of the coboundary route;
    ``a_ij = 1`` unless ``weighted``)."""
    col = np.concatenate([[0], np.cumsum(node_dims)])
    lap = np.zeros((int(col[-1]), int(col[-1])))
    for (i, j), w in zip(graph.edges.tolist(), _weights(graph, weighted), strict=True):
        for a, b in ((i, j), (j, i)):
            pa, pb = P(a, b), P(b, a)
            lap[col[a] : col[a + 1], col[a] : col[a + 1]] += w * pa.T @ pa
            lap[col[b] : col[b + 1], col[a] : col[a + 1]] -= w * pb.T @ pa
    return lap
