"""Restriction maps with deferred rank-one updates: ``P = base + sum_t u_t v_t^T``.

The map step of Algorithm 1 is rank one, ``P_ij += -eta lam r_ij theta_i^T`` (eq. (19) pijaupdate).
Instead of reading and writing every map each round, the factors ``(u_t, v_t)`` are kept beside
the stacked maps and folded in with one batched GEMM every ``depth`` rounds. Products with the
maps use the same sum, so the iterates are those of Algorithm 1 (up to float rounding order):

    ``P x = base x + U (V x)``,   ``P^T r = base^T r + V^T (U^T r)``.

A round then reads the maps twice (messages and the sheaf term) and writes them once every
``depth`` rounds, instead of reading them three times and writing them once. In ``bfloat16``
storage the updates also accumulate in float32 before being rounded into the maps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .ops import _chunks, apply_maps, apply_maps_t, widened

MAX_DEPTH = 32


# Stacks smaller than this are cheap to update eagerly; deferring would only add kernel calls.
MIN_DEFER_BYTES = 32 << 20


def auto_depth(edge_dim: int, stack_bytes: int = MIN_DEFER_BYTES) -> int:
    """Rounds between folds: about ``sqrt(d_e)`` balances the fold against the factors' reads
    (the factors cost ``depth / d_e`` of a map pass); 1 (plain updates) for narrow edge stalks
    and for small stacks, where per-call overhead, not memory traffic, sets the time.

    Args:
        edge_dim: ``d_e`` of the bucket.
        stack_bytes: the bucket's map bytes.
    Returns:
        Rounds between folds, in ``1..MAX_DEPTH``.
    """
    if edge_dim < 16 or stack_bytes < MIN_DEFER_BYTES:
        return 1
    return min(MAX_DEPTH, math.isqrt(edge_dim))


class DeferredMaps:
    """Stacked maps ``base[b]: [H_b, d_e, d]`` with pending factors ``u[b]: [H_b, d_e, depth]``,
    ``v[b]: [H_b, depth, d]`` (float32, or the theta dtype)."""

    def __init__(
        self, base: Sequence[torch.Tensor], depth: int | None = None, dtype: torch.dtype = torch.float32
    ):
        self.base = list(base)
        self.dtype = dtype
        self.depth = [
            auto_depth(p.shape[1], p.numel() * p.element_size())
            if depth is None or depth < 0
            else max(1, depth)
            for p in self.base
        ]
        self.u = [
            p.new_zeros((p.shape[0], p.shape[1], t), dtype=dtype) if t > 1 else None
            for p, t in zip(self.base, self.depth, strict=True)
        ]
        self.v = [
            p.new_zeros((p.shape[0], t, p.shape[2]), dtype=dtype) if t > 1 else None
            for p, t in zip(self.base, self.depth, strict=True)
        ]
        self.count = [0] * len(self.base)
        # Called before a fold writes ``base`` in place: a checkpoint being written in the background
        # from the maps of deferring buckets (sheaf_fmtl.runtime.run.checkpoints.checkpoint) waits there
        # (checkpoints copy the maps of buckets updated eagerly).
        self.before_write: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self.base)

    def apply(self, b: int, x: torch.Tensor) -> torch.Tensor:
        """``P_h x_h`` for bucket ``b``: ``[H, d] -> [H, d_e]``, pending factors included.

        Args:
            b: the bucket.
            x: one source vector per half-edge ``[H, d]``.
        Returns:
            ``[H, d_e]``: ``base x + U (V x)``.
        """
        out = apply_maps(self.base[b], x)
        t = self.count[b]
        if t:
            u, v = self.u[b], self.v[b]
            assert u is not None and v is not None
            coef = torch.bmm(x.unsqueeze(1), v[:, :t].transpose(1, 2))  # [H, 1, t]
            out = out + torch.bmm(coef, u[:, :, :t].transpose(1, 2)).squeeze(1)
        return out

    def apply_t(self, b: int, r: torch.Tensor) -> torch.Tensor:
        """``P_h^T r_h`` for bucket ``b``: ``[H, d_e] -> [H, d]``, pending factors included.

        Args:
            b: the bucket.
            r: one edge-stalk vector per half-edge ``[H, d_e]``.
        Returns:
            ``[H, d]``: ``base^T r + V^T (U^T r)``.
        """
        out = apply_maps_t(self.base[b], r)
        t = self.count[b]
        if t:
            u, v = self.u[b], self.v[b]
            assert u is not None and v is not None
            coef = torch.bmm(r.unsqueeze(1), u[:, :, :t])  # [H, 1, t]
            out = out + torch.bmm(coef, v[:, :t]).squeeze(1)
        return out

    def add_rank_one(self, b: int, r: torch.Tensor, x: torch.Tensor, scale: float) -> None:
        """``P_h += scale * r_h x_h^T``, deferred until ``depth`` updates are pending.

        Args:
            b: the bucket.
            r: ``[H, d_e]`` residuals ``r_ij``.
            x: ``[H, d]`` source thetas ``theta_i``.
            scale: ``-eta lam`` for the map step.
        References:
            Eq. (19) ``pijaupdate``.
        """
        u, v = self.u[b], self.v[b]
        if u is None or v is None:
            _rank_one_now(self.base[b], r, x, scale)
            return
        t = self.count[b]
        u[:, :, t] = r * scale
        v[:, t] = x
        self.count[b] = t + 1
        if t + 1 == self.depth[b]:
            self._fold(b)

    def _fold(self, b: int) -> None:
        t = self.count[b]
        if not t:
            return
        if self.before_write is not None:
            self.before_write()
        u, v, p = self.u[b], self.v[b], self.base[b]
        assert u is not None and v is not None
        uu, vv = u[:, :, :t].contiguous(), v[:, :t]
        if p.dtype == uu.dtype:
            p.baddbmm_(uu, vv)
        else:  # narrow storage: widen a chunk, fold in float32, round once
            for s in _chunks(p):
                p[s].copy_(widened(p[s], uu.dtype).baddbmm_(uu[s], vv[s]))
        self.count[b] = 0

    def materialize(self) -> list[torch.Tensor]:
        """Fold every pending update in.

        Returns:
            The stacked maps ``[H_b, d_e, d]`` per bucket (the stored tensors, not copies).
        """
        for b in range(len(self.base)):
            self._fold(b)
        return self.base


def _rank_one_now(p: torch.Tensor, r: torch.Tensor, x: torch.Tensor, scale: float) -> None:
    if p.dtype == r.dtype:
        p.addcmul_(r.unsqueeze(2), x.unsqueeze(1), value=scale)
        return
    for s in _chunks(p):
        p[s].copy_(widened(p[s], r.dtype).addcmul_(r[s].unsqueeze(2), x[s].unsqueeze(1), value=scale))
