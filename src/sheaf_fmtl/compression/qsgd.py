"""``qsgd``: stochastic quantisation to ``s = 2^(b-1) - 1`` levels of ``|x_k| / ||x||`` (Alistarh et
al., NeurIPS 2017), ``b = quantization_bits`` bits a coordinate (its signed level ``v in [-s, s]``
stored as ``v + s``) and one float32 norm a message: ``32 + b d`` bits. The quantisation is
unbiased with variance up to ``min(d/s^2, sqrt(d)/s) ||x||^2``; decoding divides it by ``tau = 1 +
min(d/s^2, sqrt(d)/s)`` so that the compressor contracts, ``omega = 1/tau`` (CHOCO-SGD's rescaled
``qsgd``)."""

from __future__ import annotations

import math
from typing import cast

import torch

from . import bitpack
from .base import Draw, padded, register
from .draws import QSGD_ROUNDING, uniform


@register("qsgd")
class QSGD:
    name = "qsgd"

    def __init__(self, quantization_bits: int, **_: object) -> None:
        self.bits = quantization_bits
        self.levels = 2 ** (quantization_bits - 1) - 1

    def tau(self, d: int) -> float:
        s = self.levels
        return float(1.0 + min(d / s**2, math.sqrt(d) / s))

    def raw_bits(self, d: int) -> int:
        return 32 + self.bits * d

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        return 1.0 / self.tau(d)

    def levels_of(self, x: torch.Tensor, draw: Draw) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm [M, 1], v [M, d])``: the signed integer levels, rounded up with probability the
        fractional part (so ``E[norm v / s] = x``)."""
        norm = x.double().norm(dim=1, keepdim=True).float()
        scaled = x.abs().double() / torch.where(norm > 0, norm, norm.new_ones(())).double() * self.levels
        up = uniform(draw, QSGD_ROUNDING, x.shape[1], x.device) < (scaled - scaled.floor())
        level = (scaled.floor() + up.double()).clamp(max=self.levels).long()
        return norm, torch.where(x < 0, -level, level)

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        norm, v = self.levels_of(x, draw)
        codes = bitpack.pack_uint(v + self.levels, self.bits)
        return torch.cat([bitpack.floats_to_bytes(norm), codes], dim=1)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        norm = bitpack.bytes_to_floats(wire, 1)
        v = bitpack.unpack_uint(wire[:, 4:], d, self.bits) - self.levels
        return cast("torch.Tensor", norm * v.float() / (self.levels * self.tau(d)))
