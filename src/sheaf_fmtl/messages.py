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
from typing import NamedTuple, Protocol

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class EdgeLayout:
    """Half-edge ``q`` (in buffer order) owns elements ``offsets[q] : offsets[q] + sizes[q]``.

    ``rev[q]`` is the buffer position of the opposite half-edge, or ``-1`` when a process holding
    only some clients (a shard) does not hold it; ``sizes[rev]`` must equal ``sizes`` for a
    symmetric payload such as a sheaf message (``d_ij = d_ji``). ``half_edges[q]``: the graph
    half-edge at position ``q`` (default ``q``: the whole graph, in graph order); ``rev_sizes[q]``:
    the size of what arrives at ``q`` (default ``sizes[rev]``; a shard gives it for every ``q``).
    """

    sizes: np.ndarray  # [H] int64
    rev: np.ndarray  # [H] int64
    half_edges: np.ndarray | None = None  # [H] graph half-edge ids
    rev_sizes: np.ndarray | None = None  # [H] elements arriving at each position
    offsets: np.ndarray = field(init=False)
    total: int = field(init=False)
    _index: dict[str, torch.Tensor] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        offs = np.zeros(len(self.sizes), np.int64)
        if len(self.sizes):
            offs[1:] = np.cumsum(self.sizes)[:-1]
        object.__setattr__(self, "offsets", offs)
        object.__setattr__(self, "total", int(self.sizes.sum()))
        if self.half_edges is None:
            object.__setattr__(self, "half_edges", np.arange(len(self.sizes), dtype=np.int64))
        if self.rev_sizes is None:
            if (self.rev < 0).any():
                raise ValueError("a layout with half-edges held elsewhere (rev = -1) needs rev_sizes")
            object.__setattr__(self, "rev_sizes", self.sizes[self.rev])

    @property
    def whole(self) -> bool:
        """Whether every reverse half-edge is held here (one process holds the whole graph)."""
        return bool((self.rev >= 0).all())

    def with_sizes(self, sizes: np.ndarray, rev_sizes: np.ndarray | None = None) -> EdgeLayout:
        """The same half-edges with other payload sizes (e.g. one scalar each)."""
        return EdgeLayout(
            sizes, self.rev, self.half_edges, sizes[self.rev] if rev_sizes is None else rev_sizes
        )

    def reversed(self) -> EdgeLayout:
        """The layout of what arrives: at position ``q`` the payload sent along the reverse half-edge."""
        assert self.rev_sizes is not None
        if np.array_equal(self.rev_sizes, self.sizes):
            return self
        return EdgeLayout(self.rev_sizes, self.rev, self.half_edges, self.sizes)

    def exchange_index(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``incoming = outgoing[index]``: element-level gather of the reverse half-edges' payloads
        (a layout that holds every reverse half-edge)."""
        key = str(device)
        if key not in self._index:
            if not self.whole:
                raise ValueError("in-process exchange of a shard layout: some reverse half-edges are remote")
            self._index[key] = torch.as_tensor(
                element_index(self.offsets[self.rev], self.sizes[self.rev]), device=device
            )
        return self._index[key]

    def exchange(self, data: torch.Tensor) -> torch.Tensor:
        """``data.index_select(0, self.exchange_index(data.device))``: what arrives at every position
        of an in-process exchange. When every payload has the same size ``d`` (one model per
        half-edge, one sheaf bucket) it is taken by rows of the ``[H, d]`` view: the same elements,
        ~4x faster on the CPU than an element-level gather."""
        key = f"rows:{data.device}"
        if key not in self._index:
            sizes = self.sizes
            equal = len(sizes) > 0 and sizes[0] > 0 and bool((sizes == sizes[0]).all()) and self.whole
            self._index[key] = torch.as_tensor(self.rev, device=data.device) if equal else torch.empty(0)
        rows = self._index[key]
        if not len(rows):
            return data.index_select(0, self.exchange_index(data.device))
        return data.reshape(len(rows), -1).index_select(0, rows).view(-1)

    def element_positions(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``[total]``: the buffer position of the half-edge that owns each element (cached)."""
        key = f"elements:{device}"
        if key not in self._index:
            sizes = torch.as_tensor(self.sizes, dtype=torch.long)
            self._index[key] = torch.repeat_interleave(torch.arange(len(self.sizes)), sizes).to(device)
        return self._index[key]


def element_index(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + n) for s, n in zip(starts, sizes))`` without a Python loop."""
    within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    out: np.ndarray = np.repeat(starts, sizes) + within
    return out


class EdgeTensor(NamedTuple):
    """A flat payload buffer and the half-edge layout it follows."""

    data: torch.Tensor
    layout: EdgeLayout
    # As received: ``[H]`` bool per position, whether the neighbour's message arrived and passed
    # validation (:mod:`sheaf_fmtl.runtime.engine.faults`); the data of the others is zero. ``None``: all did.
    heard: torch.Tensor | None = None


class ServerTensor(NamedTuple):
    """Rows to average at a parameter server: ``data [N, d]`` (row ``k`` from client ``k``) and
    non-negative aggregation ``weights [N]`` (e.g. sample counts), known to the server in advance and
    so not transmitted. What arrives is the same type, each row holding ``sum_k w_k data_k / sum_k w_k``
    (a read-only broadcast view; clone it before writing in place). As received, ``average [d]`` is
    the server's average and ``reached`` (bool scalar) whether any row went into it."""

    data: torch.Tensor
    weights: torch.Tensor
    average: torch.Tensor | None = None
    reached: torch.Tensor | None = None


Payload = dict[str, EdgeTensor | ServerTensor]


def exchanged(item: EdgeTensor) -> EdgeTensor:
    """What arrives for ``item`` when every reverse half-edge is held here: one gather."""
    return EdgeTensor(item.layout.exchange(item.data), item.layout.reversed())


class Comm(Protocol):
    """What algorithms may ask of the runtime besides the counted exchange: an uncounted
    exchange for reporting (:meth:`peek`, e.g. the sheaf energy) and sums / maxima over every
    process (identity in one process)."""

    def peek(self, payload: dict[str, EdgeTensor]) -> dict[str, EdgeTensor]: ...

    def all_sum(self, t: torch.Tensor) -> torch.Tensor: ...

    def all_max(self, t: torch.Tensor) -> torch.Tensor: ...


class LocalComm:
    """:class:`Comm` of one process holding every client."""

    def peek(self, payload: dict[str, EdgeTensor]) -> dict[str, EdgeTensor]:
        return {name: exchanged(item) for name, item in payload.items()}

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        return t
