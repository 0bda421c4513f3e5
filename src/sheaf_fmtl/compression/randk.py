"""``rand-k``: ``k`` coordinates drawn uniformly at the sender, their values and indices (no
rescaling: CHOCO-SGD's ``rand_k``). Bits: ``32 k`` plus the cheaper of ``k ceil(log2 d)`` and ``d``."""

from __future__ import annotations

import torch

from .base import Draw, kept, padded, register
from .draws import random_subset
from .sparse import decode_sparse, encode_sparse, sparse_raw_bits, wire_indices


@register("rand-k")
class RandK:
    name = "rand-k"

    def __init__(self, fraction: float, **_: object) -> None:
        self.fraction = fraction

    def raw_bits(self, d: int) -> int:
        return sparse_raw_bits(d, kept(d, self.fraction), with_indices=True)

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        """``k/d``: ``E||x - C(x)||^2 = (1 - k/d) ||x||^2``."""
        return kept(d, self.fraction) / d

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        d = x.shape[1]
        return encode_sparse(x, random_subset(draw, d, kept(d, self.fraction), x.device), with_indices=True)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        return decode_sparse(wire, d, wire_indices(wire, d, kept(d, self.fraction)))
