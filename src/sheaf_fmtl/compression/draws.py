"""The random numbers of the compressors: a counter-based hash of ``(seed, stream, sender, round,
element)`` (:mod:`sheaf_fmtl.sheaf.selection`'s), so a draw depends on the sender's global id and
the round only, whichever process or device computes it."""

from __future__ import annotations

import torch

from ..sheaf.selection import edge_keys, hash_uniform32
from .base import Draw

#: Streams of the compressors' draws (the sheaf's maps use 1 and 2 with edge ids).
RAND_K, QSGD_ROUNDING = 11, 12


def uniform_bits(draw: Draw, stream: int, d: int, device: torch.device) -> torch.Tensor:
    """``[M, d]`` int64 holding 32-bit random integers on ``device``, one row per sender."""
    senders = draw.senders.to(device=device, dtype=torch.long)
    keys = edge_keys(draw.seed, senders, draw.round, stream)[:, None]
    return hash_uniform32(keys, torch.arange(d, device=device)[None, :])


def uniform(draw: Draw, stream: int, d: int, device: torch.device) -> torch.Tensor:
    """``[M, d]`` float64 uniforms in ``[0, 1)``."""
    return uniform_bits(draw, stream, d, device).double() / 2.0**32


def random_subset(draw: Draw, d: int, k: int, device: torch.device) -> torch.Tensor:
    """``[M, k]``: ``k`` distinct coordinates per row, uniformly among the ``d``-choose-``k`` subsets:
    the ``k`` largest of ``d`` independent 32-bit draws, equal draws ordered by lower index (the keys
    ``draw d + (d - 1 - index)`` are distinct, so every device picks the same coordinates)."""
    order = torch.arange(d - 1, -1, -1, device=device)
    keys = uniform_bits(draw, RAND_K, d, device) * d + order  # < 2^32 d: fits int64 for d < 2^31
    return keys.topk(k, dim=1).indices
