"""Stalk dimensions: ``d_i`` per client (its parameter count) and ``d_ij`` per edge."""

from __future__ import annotations

import math

import numpy as np

from .graph import ClientGraph


def edge_dim(gamma: float, d_i: int, d_j: int) -> int:
    """``d_ij = max(1, floor(gamma * min(d_i, d_j)))`` (paper Section 5, "Parameters").

    A tiny tolerance keeps ``floor(0.29 * 100)`` at 29 despite binary rounding.

    Args:
        gamma: in ``(0, 1]`` (ValueError otherwise).
        d_i, d_j: the two node stalks.
    Returns:
        ``d_ij`` (``= d_ji``).

    Examples:
        >>> from sheaf_fmtl.sheaf.stalks import edge_dim
        >>> edge_dim(0.29, 100, 200), edge_dim(0.5, 4, 2), edge_dim(0.01, 50, 70)
        (29, 1, 1)
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    return max(1, math.floor(gamma * min(d_i, d_j) + 1e-9))


def edge_dims(graph: ClientGraph, node_dims: np.ndarray, gamma: float) -> np.ndarray:
    """``[E]`` edge-stalk sizes for the undirected edges of ``graph``.

    Args:
        graph: the client graph.
        node_dims: ``[N]`` ``d_i``.
        gamma: see :func:`edge_dim`.
    Returns:
        ``[E]`` int64 ``d_ij``, in the order of ``graph.edges``.
    """
    return np.array([edge_dim(gamma, int(node_dims[i]), int(node_dims[j])) for i, j in graph.edges], np.int64)
