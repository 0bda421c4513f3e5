"""``rand-k-seeded``: ``k`` coordinates drawn from ``(seed, sender, round)``, which every receiver
draws again, so only the ``k`` float32 values travel (``32 k`` bits): the message of redrawn
maps (``maps=redrawn``) at ``gamma = k/d``, with the coordinates drawn per sender rather than per
edge. The draw is :class:`~sheaf_fmtl.sheaf.selection.SelectionDraws`' stratified selection
(one coordinate in each of ``k`` strata of a randomly rotated ``0..d-1``: each coordinate with
probability exactly ``k/d``)."""

from __future__ import annotations

import numpy as np
import torch

from ..sheaf.selection import SelectionDraws
from .base import Draw, kept, padded, register
from .sparse import decode_sparse, encode_sparse

#: Stream of the seeded selections (the sheaf's maps draw theirs from stream 1 with edge ids).
SEEDED = 13


def seeded_subset(draw: Draw, d: int, k: int, device: torch.device) -> torch.Tensor:
    """``[M, k]`` on ``device``: the coordinates sender ``draw.senders[r]`` keeps in ``draw.round``."""
    m = len(draw.senders)
    ids = draw.senders.cpu().numpy()
    draws = SelectionDraws(draw.seed, ids, np.full(m, d), np.full(m, k), device, stream=SEEDED)
    return draws.positions(draw.round).view(m, k)


@register("rand-k-seeded")
class SeededRandK:
    name = "rand-k-seeded"

    def __init__(self, fraction: float, **_: object) -> None:
        self.fraction = fraction

    def raw_bits(self, d: int) -> int:
        return 32 * kept(d, self.fraction)

    def message_bits(self, d: int) -> int:
        return padded(self.raw_bits(d))

    def omega(self, d: int) -> float:
        return kept(d, self.fraction) / d

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        d = x.shape[1]
        return encode_sparse(x, seeded_subset(draw, d, kept(d, self.fraction), x.device), with_indices=False)

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        return decode_sparse(wire, d, seeded_subset(draw, d, kept(d, self.fraction), wire.device))
