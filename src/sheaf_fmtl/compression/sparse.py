"""Sparsified messages: ``k`` float32 values and, unless a shared seed gives them, their indices in
the cheaper of a list and a mask (:func:`.bitpack.index_bits`). What top-k and rand-k share."""

from __future__ import annotations

import torch

from . import bitpack


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
    """The indices a sparse message carries, ``[M, k]`` in the order of its values."""
    kind, _ = bitpack.index_bits(d, k)
    rest = wire[:, 4 * k :]
    if kind == "list":
        return bitpack.unpack_uint(rest, k, bitpack.index_width(d))
    mask = bitpack.unpack_mask(rest, d)
    order = torch.arange(d, device=wire.device)
    keys = torch.where(mask, order, order + d)  # the set bits first, each part in ascending order
    return keys.topk(k, dim=1, largest=False, sorted=True).values


def decode_sparse(wire: torch.Tensor, d: int, index: torch.Tensor) -> torch.Tensor:
    """``[M, d]``: the message's values at ``index [M, k]``, zero elsewhere."""
    values = bitpack.bytes_to_floats(wire, index.shape[1])
    return torch.zeros(len(wire), d, device=wire.device).scatter_(1, index, values)
