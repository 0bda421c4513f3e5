"""The types that travel between clients, shared by the mathematics, the algorithms and the runtime.

- :class:`EdgeLayout`: where each half-edge's payload sits in one flat buffer, and the exchange
  permutation (what arrives at half-edge ``q`` is what was sent along ``rev[q]``).
- :class:`EdgeTensor`: a flat payload buffer and its layout (decentralized messages).
- :class:`ServerTensor`: one row per client to average at a parameter server (star baselines).
- :data:`Payload`: what an algorithm hands the transport, ``{name: EdgeTensor | ServerTensor}``.

This module imports nothing from the package: ``sheaf``, ``algorithms`` and ``runtime`` all sit above it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class EdgeLayout:
    """Half-edge ``q`` (in buffer order) owns elements ``offsets[q] : offsets[q] + sizes[q]``.

    ``rev[q]`` is the buffer position of the opposite half-edge; ``sizes[rev]`` must equal ``sizes``
    for a symmetric payload such as a sheaf message (``d_ij = d_ji``). ``half_edges[q]``: the graph
    half-edge id at position ``q`` (``None``: position ``q`` is half-edge ``q``), which keys the
    simulated faults (:mod:`sheaf_fmtl.runtime.faults`).
    """

    sizes: np.ndarray  # [H] int64
    rev: np.ndarray  # [H] int64
    half_edges: np.ndarray | None = None  # [H] graph half-edge id per position (None: the identity)
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
        return EdgeLayout(self.sizes[self.rev], self.rev, self.half_edges)

    def exchange_index(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``incoming = outgoing[index]``: element-level gather of the reverse half-edges' payloads."""
        key = str(device)
        if key not in self._index:
            src_sizes = self.sizes[self.rev]
            starts = np.repeat(self.offsets[self.rev], src_sizes)
            within = np.arange(int(src_sizes.sum())) - np.repeat(np.cumsum(src_sizes) - src_sizes, src_sizes)
            self._index[key] = torch.as_tensor(starts + within, dtype=torch.long, device=device)
        return self._index[key]


class EdgeTensor(NamedTuple):
    """A flat payload buffer and the half-edge layout it follows."""

    data: torch.Tensor
    layout: EdgeLayout
    # As received: ``[H]`` bool per position, whether the neighbour's message arrived and passed
    # validation (:mod:`sheaf_fmtl.runtime.faults`); the data of the others is zero. ``None``: all did.
    heard: torch.Tensor | None = None


class ServerTensor(NamedTuple):
    """Rows to average at a parameter server: ``data [N, d]`` (row ``k`` from client ``k``) and
    non-negative aggregation ``weights [N]`` (e.g. sample counts), known to the server in advance and
    so not transmitted. What arrives is the same type, each row holding ``sum_k w_k data_k / sum_k w_k``
    (a read-only broadcast view; clone it before writing in place)."""

    data: torch.Tensor
    weights: torch.Tensor


Payload = dict[str, EdgeTensor | ServerTensor]
