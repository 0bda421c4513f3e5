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
from .base import Draw, register
from .sparse import Sparsifier

#: Stream of the seeded selections (the sheaf's maps draw theirs from stream 1 with edge ids).
SEEDED = 13


def seeded_subset(draw: Draw, d: int, k: int, device: torch.device) -> torch.Tensor:
    """``[M, k]`` on ``device``: the coordinates sender ``draw.senders[r]`` keeps in ``draw.round``."""
    m = len(draw.senders)
    ids = draw.senders.cpu().numpy()
    draws = SelectionDraws(draw.seed, ids, np.full(m, d), np.full(m, k), device, stream=SEEDED)
    return draws.positions(draw.round).view(m, k)


@register("rand-k-seeded")
class SeededRandK(Sparsifier):
    name = "rand-k-seeded"
    sends_indices = False

    def keep(self, x: torch.Tensor, draw: Draw, k: int) -> torch.Tensor:
        return seeded_subset(draw, x.shape[1], k, x.device)

    def drawn(self, d: int, draw: Draw, k: int, device: torch.device) -> torch.Tensor:
        return seeded_subset(draw, d, k, device)
