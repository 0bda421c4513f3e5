"""Sheaf operators on stacked state, never a dense matrix.

Messages ``m_ij = P_ij theta_i``; residuals ``r_ij = P_ij theta_i - P_ji theta_j`` (the coboundary
of edge ``{i, j}`` seen from ``i``); Laplacian action ``(L theta)_i = sum_j P_ij^T r_ij`` (paper
eq. for ``L_{j,i}``); energy ``theta^T L theta = sum_e ||r_e||^2`` (Lemma 1).
Maps may be stored in a narrower dtype than the thetas; products are taken in the theta dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .layout import SheafLayout

# Convert at most this many map elements at a time when map and theta dtypes differ.
_CHUNK_ELEMENTS = 1 << 24


_WORKSPACE: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def widened(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``p`` (one chunk of narrow maps) copied into a reused buffer of ``dtype``: converting into
    fresh allocations is several times slower (page faults) than into a warm buffer.

    Args:
        p: maps ``[h, d_e, d]`` in their storage dtype (e.g. ``bfloat16``).
        dtype: the dtype to compute in (the thetas').
    Returns:
        A view of the shared buffer, valid until the next call with the same dtype and device.
    """
    key = (dtype, p.device)
    buf = _WORKSPACE.get(key)
    if buf is None or buf.numel() < p.numel():
        buf = _WORKSPACE[key] = torch.empty(max(p.numel(), _CHUNK_ELEMENTS), dtype=dtype, device=p.device)
    out = buf[: p.numel()].view(p.shape)
    out.copy_(p)
    return out


def _chunks(p: torch.Tensor) -> list[slice]:
    per = max(1, _CHUNK_ELEMENTS // max(1, p.shape[1] * p.shape[2]))
    return [slice(s, min(s + per, p.shape[0])) for s in range(0, p.shape[0], per)]


def apply_maps(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``[H, d_e, d] x [H, d] -> [H, d_e]``: ``P_h x_h`` for every half-edge.

    Args:
        p: stacked maps ``[H, d_e, d]`` (any storage dtype).
        x: one source vector per half-edge ``[H, d]``.
    Returns:
        ``[H, d_e]`` in ``x``'s dtype.
    References:
        The messages ``P_ij theta_i`` of eq. (18) ``thetaupdate`` and Algorithm 1.
    """
    # x^T P^T as a [1, d] x [d, d_e] product per map: MKL's batched GEMV with a vector on the
    # right is several times slower than this orientation on CPU.
    if p.dtype == x.dtype:
        return torch.bmm(x.unsqueeze(1), p.transpose(1, 2)).squeeze(1)
    out = x.new_empty(p.shape[:2])
    for s in _chunks(p):
        out[s] = torch.bmm(x[s].unsqueeze(1), widened(p[s], x.dtype).transpose(1, 2)).squeeze(1)
    return out


def apply_maps_t(p: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``[H, d_e, d] x [H, d_e] -> [H, d]``: ``P_h^T r_h`` for every half-edge.

    Args:
        p: stacked maps ``[H, d_e, d]`` (any storage dtype).
        r: one edge-stalk vector per half-edge ``[H, d_e]``.
    Returns:
        ``[H, d]`` in ``r``'s dtype.
    References:
        The terms ``P_ij^T (P_ij theta_i - P_ji theta_j)`` of eq. (18) ``thetaupdate``.
    """
    if p.dtype == r.dtype:
        return torch.bmm(r.unsqueeze(1), p).squeeze(1)
    out = r.new_empty((p.shape[0], p.shape[2]))
    for s in _chunks(p):
        out[s] = torch.bmm(r[s].unsqueeze(1), widened(p[s], r.dtype)).squeeze(1)
    return out


Maps = Sequence[torch.Tensor] | Any  # stacked tensors per bucket, or a DeferredMaps (sheaf.deferred)


def _apply(maps: Maps, b: int, x: torch.Tensor) -> torch.Tensor:
    return maps.apply(b, x) if hasattr(maps, "apply") else apply_maps(maps[b], x)


def _apply_t(maps: Maps, b: int, r: torch.Tensor) -> torch.Tensor:
    return maps.apply_t(b, r) if hasattr(maps, "apply_t") else apply_maps_t(maps[b], r)


def messages(layout: SheafLayout, thetas: Sequence[torch.Tensor], maps: Maps) -> torch.Tensor:
    """Flat buffer of ``P_ij theta_i`` for every half-edge (buffer order of ``layout.messages``).

    Args:
        layout: where each half-edge's block lives.
        thetas: per cohort ``[C, d]``.
        maps: stacked maps per bucket, or a :class:`~sheaf_fmtl.sheaf.deferred.DeferredMaps`.
    Returns:
        ``[sum_h d_h]``, each bucket's block a row-major ``[H_b, d_e]``.
    References:
        What client ``i`` sends to ``j`` in Algorithm 1 (eq. (18) ``thetaupdate``).
    """
    out = thetas[0].new_empty(layout.messages.total)
    for k, (b, view) in enumerate(zip(layout.buckets, layout.bucket_messages(out), strict=True)):
        view.copy_(_apply(maps, k, b.sources(thetas)))
    return out


def residuals(
    layout: SheafLayout, outgoing: torch.Tensor, incoming: torch.Tensor | None = None
) -> torch.Tensor:
    """``r_ij = P_ij theta_i - P_ji theta_j`` for every half-edge; ``incoming`` defaults to the
    in-process exchange of ``outgoing``.

    Args:
        layout: the message layout (its exchange index pairs ``ij`` with ``ji``).
        outgoing: ``[sum_h d_h]`` messages from :func:`messages`.
        incoming: ``[sum_h d_h]`` the reverse half-edges' messages, as received.
    Returns:
        ``[sum_h d_h]`` residuals (``r_ji = -r_ij``).
    References:
        The coboundary ``delta(theta)_e`` (paper, "A Sheaf Theoretic Approach") seen from each end of ``e``.
    """
    if incoming is None:
        incoming = outgoing.index_select(0, layout.messages.exchange_index(outgoing.device))
    return outgoing - incoming


def transpose_sum(
    layout: SheafLayout, maps: Maps, per_edge: torch.Tensor, thetas: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Per cohort ``[C, d]``: ``sum_j P_ij^T v_ij`` for a flat per-half-edge buffer ``v``.

    Args:
        layout: where each half-edge's block lives.
        maps: stacked maps per bucket, or a ``DeferredMaps``.
        per_edge: ``[sum_h d_h]`` one edge-stalk vector per half-edge (e.g. residuals).
        thetas: per cohort ``[C, d]``, for the output shapes.
    Returns:
        Per cohort ``[C, d]`` (zero for clients without edges).
    References:
        The sum in eq. (18) ``thetaupdate``; with residuals, ``L_F theta`` (eq. (3)
        ``Laplacian_matrix_form``).
    """
    out = [torch.zeros_like(t) for t in thetas]
    for k, (b, v) in enumerate(zip(layout.buckets, layout.bucket_messages(per_edge), strict=True)):
        out[b.cohort].index_add_(0, b.src_pos_on(v.device), _apply_t(maps, k, v))
    return out


def laplacian_action(layout: SheafLayout, thetas: Sequence[torch.Tensor], maps: Maps) -> list[torch.Tensor]:
    """``L_F theta`` per cohort, ``(L theta)_i = sum_j P_ij^T (P_ij theta_i - P_ji theta_j)``.

    Args:
        layout: the sheaf layout.
        thetas: per cohort ``[C, d]``.
        maps: stacked maps per bucket, or a ``DeferredMaps``.
    Returns:
        Per cohort ``[C, d]``.
    References:
        Eqs. (2) ``Laplacian_defn`` / (3) ``Laplacian_matrix_form`` (``L_F = P^T P``), never formed.

    Examples:
        With identity maps on the path ``0 - 1 - 2``, ``(L theta)_i = sum_j (theta_i - theta_j)``:

        >>> import torch
        >>> from sheaf_fmtl.sheaf.graph import ClientGraph
        >>> from sheaf_fmtl.sheaf.layout import build_layout
        >>> from sheaf_fmtl.sheaf.maps import init_maps
        >>> from sheaf_fmtl.sheaf.ops import laplacian_action
        >>> layout = build_layout(ClientGraph(3, [[0, 1], [1, 2]]), [2, 2, 2], [0, 0, 0], gamma=1.0)
        >>> thetas = [torch.tensor([[0.0, 1.0], [2.0, 1.0], [2.0, 4.0]], dtype=torch.float64)]
        >>> laplacian_action(layout, thetas, init_maps(layout, "identity", seed=0))[0].tolist()
        [[-2.0, 0.0], [2.0, -3.0], [0.0, 3.0]]
    """
    return transpose_sum(layout, maps, residuals(layout, messages(layout, thetas, maps)), thetas)


def energy_from_residuals(r: torch.Tensor) -> torch.Tensor:
    """``sum_e ||r_e||^2`` over undirected edges; each appears twice in the buffer (``r_ji = -r_ij``).

    Args:
        r: ``[sum_h d_h]`` residuals of every half-edge (both directions).
    Returns:
        A float64 scalar.
    References:
        Lemma 1.
    """
    return 0.5 * (r.double() ** 2).sum()


def energy(layout: SheafLayout, thetas: Sequence[torch.Tensor], maps: Maps) -> torch.Tensor:
    """``theta^T L_F theta = sum_{e={i,j}} ||P_ij theta_i - P_ji theta_j||^2``.

    Args:
        layout: the sheaf layout (all clients in one process).
        thetas: per cohort ``[C, d]``.
        maps: stacked maps per bucket, or a ``DeferredMaps``.
    Returns:
        A float64 scalar.
    References:
        Lemma 1; ``lam / 2`` times it is the coupling term of problem (8) ``P2``.

    Examples:
        With identity maps the sum of the squared differences along the edges of the path
        ``0 - 1 - 2``, ``||theta_0 - theta_1||^2 + ||theta_1 - theta_2||^2 = 4 + 9``:

        >>> import torch
        >>> from sheaf_fmtl.sheaf.graph import ClientGraph, make_graph
        >>> from sheaf_fmtl.sheaf.layout import build_layout
        >>> from sheaf_fmtl.sheaf.maps import init_maps
        >>> from sheaf_fmtl.sheaf.ops import energy, laplacian_action
        >>> path = build_layout(ClientGraph(3, [[0, 1], [1, 2]]), [2, 2, 2], [0, 0, 0], gamma=1.0)
        >>> thetas = [torch.tensor([[0.0, 1.0], [2.0, 1.0], [2.0, 4.0]], dtype=torch.float64)]
        >>> float(energy(path, thetas, init_maps(path, "identity", seed=0)))
        13.0

        With random maps between models of two sizes it is still ``theta^T L_F theta``:

        >>> layout = build_layout(make_graph("complete", 4), [3, 3, 5, 5], [0, 0, 1, 1], gamma=0.7)
        >>> maps = init_maps(layout, "gaussian", seed=0)
        >>> gen = torch.Generator().manual_seed(0)
        >>> thetas = [torch.randn(2, d, generator=gen, dtype=torch.float64) for d in (3, 5)]
        >>> quadratic = sum((t * lt).sum() for t, lt in zip(thetas, laplacian_action(layout, thetas, maps)))
        >>> bool(torch.isclose(energy(layout, thetas, maps), quadratic))
        True
    """
    return energy_from_residuals(residuals(layout, messages(layout, thetas, maps)))


def map_frobenius(layout: SheafLayout, maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """``||P_ij||_F`` of each graph half-edge ``h = src[h] -> dst[h]`` (the map's owner first); zero
    on the half-edges held by another process.

    Args:
        layout: the sheaf layout.
        maps: stacked maps per bucket (folded, e.g. ``DeferredMaps.materialize()``).
    Returns:
        ``[2E]`` float64 on the CPU, in the graph's half-edge order (``[N, N]`` by
        :func:`sheaf_fmtl.sheaf.graph.half_edge_matrix`).
    """
    out = torch.zeros(layout.graph.num_half_edges, dtype=torch.float64)
    for b, p in zip(layout.buckets, maps, strict=True):
        norms = torch.cat([torch.linalg.vector_norm(p[s].double(), dim=(1, 2)) for s in _chunks(p)])
        out[torch.as_tensor(b.half_edges)] = norms.cpu()  # maps may live on a GPU
    return out
