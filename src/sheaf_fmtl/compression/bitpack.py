"""Bit-level packing of the compressed messages (vectorised over rows and elements): unsigned
integers of a given width, masks, float32 values; and the cheaper index encoding."""

from __future__ import annotations

import math

import torch

_BYTE = torch.arange(8)


def nbytes(bits: int) -> int:
    return (bits + 7) // 8


def _pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """``[M, n]`` 0/1 -> ``[M, ceil(n/8)]`` uint8, least significant bit first."""
    m, n = bits.shape
    pad = nbytes(n) * 8 - n
    if pad:
        bits = torch.cat([bits, bits.new_zeros(m, pad)], dim=1)
    weights = (1 << _BYTE).to(bits.device)
    return (bits.view(m, -1, 8).long() * weights).sum(2).to(torch.uint8)


def _unpack_bits(wire: torch.Tensor, n: int) -> torch.Tensor:
    """``[M, B]`` uint8 -> ``[M, n]`` int64 0/1 (the first ``n`` bits)."""
    bits = (wire.long().unsqueeze(2) >> _BYTE.to(wire.device)) & 1
    return bits.view(len(wire), -1)[:, :n]


def pack_uint(values: torch.Tensor, bits: int) -> torch.Tensor:
    """``[M, n]`` integers in ``[0, 2^bits)`` -> ``[M, ceil(n bits / 8)]`` uint8 (a bit stream)."""
    m, n = values.shape
    if bits == 0 or n == 0:
        return torch.zeros(m, 0, dtype=torch.uint8, device=values.device)
    shifts = torch.arange(bits, device=values.device)
    stream = (values.long().unsqueeze(2) >> shifts) & 1
    return _pack_bits(stream.view(m, n * bits))


def unpack_uint(wire: torch.Tensor, n: int, bits: int) -> torch.Tensor:
    """The inverse of :func:`pack_uint`: ``[M, n]`` int64."""
    m = len(wire)
    if bits == 0 or n == 0:
        return torch.zeros(m, n, dtype=torch.long, device=wire.device)
    stream = _unpack_bits(wire, n * bits).view(m, n, bits)
    shifts = torch.arange(bits, device=wire.device)
    return (stream << shifts).sum(2)


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """``[M, d]`` bool -> ``[M, ceil(d/8)]`` uint8."""
    return _pack_bits(mask.long())


def unpack_mask(wire: torch.Tensor, d: int) -> torch.Tensor:
    """``[M, B]`` uint8 -> ``[M, d]`` bool."""
    return _unpack_bits(wire, d).bool()


def floats_to_bytes(x: torch.Tensor) -> torch.Tensor:
    """``[M, n]`` -> ``[M, 4n]`` uint8: the float32 values as stored (little-endian machines)."""
    return x.float().contiguous().view(torch.uint8).view(len(x), 4 * x.shape[1])


def bytes_to_floats(wire: torch.Tensor, n: int) -> torch.Tensor:
    """``[M, >= 4n]`` uint8 -> ``[M, n]`` float32 from the first ``4n`` bytes."""
    flat = wire[:, : 4 * n].reshape(-1).clone()  # fresh storage: aligned for the float view
    return flat.view(torch.float32).view(len(wire), n)


def index_width(d: int) -> int:
    """``ceil(log2 d)``: bits of one index into ``d`` coordinates (0 for ``d = 1``)."""
    return math.ceil(math.log2(d)) if d > 1 else 0


def index_bits(d: int, k: int) -> tuple[str, int]:
    """The cheaper encoding of ``k`` distinct indices into ``d`` coordinates: ``("list", k
    ceil(log2 d))`` or ``("mask", d)`` (a tie goes to the list)."""
    listed = k * index_width(d)
    return ("list", listed) if listed <= d else ("mask", d)
