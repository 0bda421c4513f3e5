"""``top-k``: the ``k`` largest-magnitude entries, their values and indices (Stich et al. 2018;
CHOCO-SGD's ``top_k``). Bits: ``32 k`` plus the cheaper of ``k ceil(log2 d)`` and ``d``;
``omega = k/d`` is its worst case (a vector of equal magnitudes)."""

from __future__ import annotations

import torch

from .base import Draw, register
from .sparse import Sparsifier


@register("top-k")
class TopK(Sparsifier):
    name = "top-k"

    def keep(self, x: torch.Tensor, draw: Draw, k: int) -> torch.Tensor:
        return x.abs().topk(k, dim=1).indices
