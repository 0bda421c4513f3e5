"""The ways to take the map products, timed on one stack of paper-shape maps (``--map-kernels``)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from .timing import timed


def map_kernels(
    device: str = "cpu", half_edges: int = 32, edge_dim: int = 348, node_dim: int = 34826, repeats: int = 5
) -> dict[str, Any]:
    """Effective bandwidth of each way to take the two map products (and to update the maps) on one
    stack of paper-shape maps ``[H, d_e, d]`` (float32; 1.45 GiB by default, far beyond any cache):
    ``GB/s = bytes moved / median time``, the maps read once per product, read and written once per
    update. The library's orientation was chosen on a CPU; this says which one a device prefers."""
    gen = torch.Generator(device=device).manual_seed(0)
    p = torch.randn(half_edges, edge_dim, node_dim, device=device, generator=gen)
    x = torch.randn(half_edges, node_dim, device=device, generator=gen)
    r = torch.randn(half_edges, edge_dim, device=device, generator=gen)
    depth = max(1, math.isqrt(edge_dim))
    u = torch.randn(half_edges, edge_dim, depth, device=device, generator=gen) * 1e-6
    v = torch.randn(half_edges, depth, node_dim, device=device, generator=gen)
    dst = torch.empty_like(p)
    nbytes = p.numel() * p.element_size()
    forms: dict[str, tuple[Any, int]] = {
        "copy (the floor's pass)": (lambda: dst.copy_(p), 2 * nbytes),
        "messages x^T P^T (library)": (lambda: torch.bmm(x.unsqueeze(1), p.transpose(1, 2)), nbytes),
        "messages P x": (lambda: torch.bmm(p, x.unsqueeze(2)), nbytes),
        "messages einsum": (lambda: torch.einsum("hed,hd->he", p, x), nbytes),
        "sheaf term r^T P (library)": (lambda: torch.bmm(r.unsqueeze(1), p), nbytes),
        "sheaf term P^T r": (lambda: torch.bmm(p.transpose(1, 2), r.unsqueeze(2)), nbytes),
        "sheaf term einsum": (lambda: torch.einsum("hed,he->hd", p, r), nbytes),
        f"fold baddbmm_ (depth {depth})": (lambda: dst.baddbmm_(u, v), 2 * nbytes),
        "rank-one addcmul_ (eager step)": (
            lambda: dst.addcmul_(r.unsqueeze(2), x.unsqueeze(1), value=-1e-9),
            2 * nbytes,
        ),
    }
    out: dict[str, Any] = {"shape": [half_edges, edge_dim, node_dim], "bytes": nbytes, "forms": {}}
    for name, (fn, moved) in forms.items():
        fn()  # warm-up (library handles, workspaces)
        t = statistics.median(timed(fn, device) for _ in range(repeats))
        out["forms"][name] = {"s": t, "GBps": moved / t / 1e9}
    return out
