"""``top-k``: the ``k`` largest-magnitude entries, their values and indices (Stich et al. 2018;
CHOCO-SGD's ``top_k``). Bits: ``32 k`` plus the cheaper of ``k ceil(log2 d)`` and ``d``."""

from __future__ import annotations

import torch

from .base import Draw, kept, padded, register
from .sparse import decode_sparse, encode_sparse, sparse_raw_bits, wire_indices


@register("top-k")
class TopK:
    name = "top-k"

    def __init__(self, fraction: float, **_: object) -> None:
        self.fraction = fraction

    def raw_bits(self, d: int) -> int:
        return sparse_raw_bits(d, kept(d, self.fraction), with_indices=True)

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        """``k/d``: the worst case (a vector of equal magnitudes); top-k does better on others."""
        return kept(d, self.fraction) / d

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        k = kept(x.shape[1], self.fraction)
        return encode_sparse(x, x.abs().topk(k, dim=1).indices, with_indices=True)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        return decode_sparse(wire, d, wire_indices(wire, d, kept(d, self.fraction)))
