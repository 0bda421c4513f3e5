"""``sign``: the scaled sign ``(||x||_1 / d) sign(x)`` (Karimireddy et al., ICML 2019, with error
feedback, which CHOCO's copies carry): one float32 scale and one bit a coordinate (1: negative;
zero is sent as positive), ``32 + d`` bits."""

from __future__ import annotations

import math

import torch

from . import bitpack
from .base import Draw, padded, register


@register("sign")
class Sign:
    name = "sign"

    def __init__(self, **_: object) -> None:
        pass

    def raw_bits(self, d: int) -> int:
        return 32 + d

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        """``||x||_1^2 / (d ||x||^2)``, which is ``2/pi`` for Gaussian-like vectors (at worst
        ``1/d``, one large coordinate); it sets the default consensus step only."""
        return 2.0 / math.pi

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        scale = x.abs().mean(dim=1, keepdim=True).float()
        return torch.cat([bitpack.floats_to_bytes(scale), bitpack.pack_mask(x < 0)], dim=1)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        scale = bitpack.bytes_to_floats(wire, 1)
        negative = bitpack.unpack_mask(wire[:, 4:], d)
        return torch.where(negative, -scale, scale)
