"""Sparsified messages: ``k`` float32 values and, unless a shared seed gives them, their indices in
the cheaper of a list and a mask (:func:`.bitpack.index_bits`). What top-k and rand-k share."""

from __future__ import annotations

import torch

from . import bitpack
from .base import Draw, kept, padded


def sparse_raw_bits(d: int, k: int, with_indices: bool) -> int:
    """``32 k`` plus the indices' bits when they travel."""
    return 32 * k + (bitpack.index_bits(d, k)[1] if with_indices else 0)


def encode_sparse(x: torch.Tensor, index: torch.Tensor, with_indices: bool) -> torch.Tensor:
    """The values of ``x [M, d]`` at ``index [M, k]`` (and the indices): ``[M, bytes]`` uint8."""
    m, d = x.shape
    k = index.shape[1]
    if with_indices and bitpack.index_bits(d, k)[0] == "mask":
        index = index.sort(dim=1).values  # a mask lists the values in ascending index order
    parts = [bitpack.floats_to_bytes(x.gather(1, index))]
    if with_indices:
        kind, _ = bitpack.index_bits(d, k)
        if kind == "list":
            parts.append(bitpack.pack_uint(index, bitpack.index_width(d)))
        else:
            mask = torch.zeros(m, d, dtype=torch.bool, device=x.device).scatter_(1, index, True)
            parts.append(bitpack.pack_mask(mask))
    return torch.cat(parts, dim=1)  # 4k bytes, then the indices' bits padded to whole bytes


def wire_indices(wire: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """The indices a sparse message carries, ``[M, k]`` in the order of its values. A mask with
    fewer than ``k`` bits set (a lost message, zeroed by the runtime: zero values) is filled up with
    unset coordinates, so the indices stay distinct and within ``[0, d)``."""
    kind, _ = bitpack.index_bits(d, k)
    rest = wire[:, 4 * k :]
    if kind == "list":
        return bitpack.unpack_uint(rest, k, bitpack.index_width(d))
    mask = bitpack.unpack_mask(rest, d)
    order = torch.arange(d, device=wire.device)
    keys = torch.where(mask, order, order + d)  # the set bits first, each part in ascending order
    return keys.topk(k, dim=1, largest=False, sorted=True).values % d


def decode_sparse(wire: torch.Tensor, d: int, index: torch.Tensor) -> torch.Tensor:
    """``[M, d]``: the message's values at ``index [M, k]``, zero elsewhere."""
    values = bitpack.bytes_to_floats(wire, index.shape[1])
    return torch.zeros(len(wire), d, device=wire.device).scatter_(1, index, values)


class Sparsifier:
    """What top-k, rand-k and rand-k-seeded share: ``k = kept(d, fraction)`` values a message, the
    indices travelling when :attr:`sends_indices`; a subclass says which coordinates it keeps
    (:meth:`keep`), and a seeded one how a receiver draws them again (:meth:`drawn`)."""

    name: str
    sends_indices = True

    def __init__(self, fraction: float, **_: object) -> None:
        self.fraction = fraction

    def raw_bits(self, d: int) -> int:
        return sparse_raw_bits(d, kept(d, self.fraction), with_indices=self.sends_indices)

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        """``k/d``: exact for a uniform random choice, the worst case of top-k's."""
        return kept(d, self.fraction) / d

    def keep(self, x: torch.Tensor, draw: Draw, k: int) -> torch.Tensor:
        """``[M, k]``: the coordinates of ``x [M, d]`` the message keeps."""
        raise NotImplementedError

    def drawn(self, d: int, draw: Draw, k: int, device: torch.device) -> torch.Tensor:
        """``[M, k]``: the kept coordinates as a receiver draws them (compressors without indices)."""
        raise NotImplementedError

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        index = self.keep(x, draw, kept(x.shape[1], self.fraction))
        return encode_sparse(x, index, with_indices=self.sends_indices)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        k = kept(d, self.fraction)
        index = wire_indices(wire, d, k) if self.sends_indices else self.drawn(d, draw, k, wire.device)
        return decode_sparse(wire, d, index)
