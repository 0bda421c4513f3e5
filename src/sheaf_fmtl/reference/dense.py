"""Naive dense coboundary and sheaf Laplacian, built entry by entry: the TEST ORACLE only.

Orientation: ``e^+ = max(i, j)``, ``e^- = min(i, j)``; ``delta(theta)_e = P_{e+} theta_{e+} -
P_{e-} theta_{e-}`` (paper, coboundary definition); ``L = delta^T delta``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..sheaf.graph import ClientGraph

MapLookup = Callable[[int, int], np.ndarray]  # (i, j) -> P_ij as a dense [d_ij, d_i] array


def dense_coboundary(
    graph: ClientGraph, node_dims: np.ndarray, edge_dims: np.ndarray, P: MapLookup
) -> np.ndarray:
    col = np.concatenate([[0], np.cumsum(node_dims)])
    row = np.concatenate([[0], np.cumsum(edge_dims)])
    delta = np.zeros((int(row[-1]), int(col[-1])))
    for e, (lo, hi) in enumerate(graph.edges.tolist()):
        rs = slice(row[e], row[e + 1])
        delta[rs, col[hi] : col[hi + 1]] += P(hi, lo)
        delta[rs, col[lo] : col[lo + 1]] -= P(lo, hi)
    return delta


def dense_laplacian(
    graph: ClientGraph, node_dims: np.ndarray, edge_dims: np.ndarray, P: MapLookup
) -> np.ndarray:
    """``L_F`` block by block from the paper's formula: ``L_ii = sum_j P_ij^T P_ij``,
    ``L_ji = -P_ji^T P_ij`` for an edge ``{i, j}`` (independent of the coboundary route)."""
    col = np.concatenate([[0], np.cumsum(node_dims)])
    lap = np.zeros((int(col[-1]), int(col[-1])))
    for i, j in graph.edges.tolist():
        for a, b in ((i, j), (j, i)):
            pa, pb = P(a, b), P(b, a)
            lap[col[a] : col[a + 1], col[a] : col[a + 1]] += pa.T @ pa
            lap[col[b] : col[b + 1], col[a] : col[a + 1]] -= pb.T @ pa
    return lap
