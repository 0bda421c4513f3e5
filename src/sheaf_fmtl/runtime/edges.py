"""Layout of per-half-edge payloads in one flat buffer, and the exchange permutation."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class EdgeLayout:
    """Half-edge ``q`` (in buffer order) owns elements ``offsets[q] : offsets[q] + sizes[q]``.

    ``rev[q]`` is the buffer position of the opposite half-edge; ``sizes[rev]`` must equal ``sizes``
    for a symmetric payload such as a sheaf message (``d_ij = d_ji``).
    """

    sizes: np.ndarray  # [H] int64
    rev: np.ndarray  # [H] int64
    offsets: np.ndarray = field(init=False)
    total: int = field(init=False)
    _index: dict[str, torch.Tensor] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        offs = np.zeros(len(self.sizes), np.int64)
        if len(self.sizes):
            offs[1:] = np.cumsum(self.sizes)[:-1]
        object.__setattr__(self, "offsets", offs)
        object.__setattr__(self, "total", int(self.sizes.sum()))

    def reversed(self) -> EdgeLayout:
        """The layout of what arrives: at position ``q`` the payload sent along ``rev[q]``."""
        if np.array_equal(self.sizes[self.rev], self.sizes):
            return self
        return EdgeLayout(self.sizes[self.rev], self.rev)

    def exchange_index(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``incoming = outgoing[index]``: element-level gather of the reverse half-edges' payloads."""
        key = str(device)
        if key not in self._index:
            src_sizes = self.sizes[self.rev]
            starts = np.repeat(self.offsets[self.rev], src_sizes)
            within = np.arange(int(src_sizes.sum())) - np.repeat(np.cumsum(src_sizes) - src_sizes, src_sizes)
            self._index[key] = torch.as_tensor(starts + within, dtype=torch.long, device=device)
        return self._index[key]
