"""``rand-k``: ``k`` coordinates drawn uniformly at the sender, their values and indices (no
rescaling: CHOCO-SGD's ``rand_k``; ``E||x - C(x)||^2 = (1 - k/d) ||x||^2``). Bits: ``32 k`` plus
the cheaper of ``k ceil(log2 d)`` and ``d``."""

from __future__ import annotations

import torch

from .base import Draw, register
from .draws import random_subset
from .sparse import Sparsifier


@register("rand-k")
class RandK(Sparsifier):
    name = "rand-k"

    def keep(self, x: torch.Tensor, draw: Draw, k: int) -> torch.Tensor:
        return random_subset(draw, x.shape[1], k, x.device)
