"""One split (training or test) of a cohort's clients, stored end to end: no padding.

Client ``c``'s ``n_c`` samples are rows ``offsets[c] .. offsets[c] + n_c`` of ``x [total, ...]`` and
``y [total]``. A mini-batch, an epoch step or an evaluation chunk names samples by their
*position* in the client's own data (``0 .. n_c - 1``; larger positions are padding, masked out by
the caller) and gathers them with one ``index_select`` (:meth:`Ragged.gather`). Padding positions
read some other stored row (clamped into range): their values are finite and weighted by 0.

The padded ``[C, n_max, ...]`` stack, for code that wants it, is built on request
(:meth:`Ragged.padded`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(eq=False)
class Ragged:
    """Per-client samples end to end: ``x [total, ...]``, ``y [total]``, ``n [C]`` and ``offsets
    [C]`` (first row of each client) on one device, ``n_host`` and ``offsets_host`` on the CPU."""

    x: torch.Tensor
    y: torch.Tensor
    n: torch.Tensor
    offsets: torch.Tensor
    n_host: torch.Tensor
    offsets_host: torch.Tensor
    n_max: int = field(init=False)  # the largest n_c, at least 1 (a padded stack's width); read once

    def __post_init__(self) -> None:
        self.n_max = max(1, int(self.n_host.max())) if len(self.n_host) else 1

    @classmethod
    def of(
        cls,
        xs: Sequence[np.ndarray],
        ys: Sequence[np.ndarray],
        dtypes: tuple[torch.dtype, torch.dtype],
        device: torch.device,
    ) -> Ragged:
        """From per-client arrays (copied once, through NumPy: read-only arrays too)."""
        sizes = np.array([len(a) for a in xs], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        total = int(sizes.sum())
        x = torch.zeros((max(total, 1), *xs[0].shape[1:]), dtype=dtypes[0]) if xs else torch.zeros(1)
        y = torch.zeros(max(total, 1), dtype=dtypes[1])
        xv, yv = x.numpy(), y.numpy()
        for a, b, s in zip(xs, ys, starts.tolist(), strict=True):
            xv[s : s + len(a)] = a
            yv[s : s + len(b)] = b
        n, off = torch.from_numpy(sizes), torch.from_numpy(starts)
        return cls(x.to(device), y.to(device), n.to(device), off.to(device), n, off)

    @classmethod
    def from_padded(cls, x: torch.Tensor, y: torch.Tensor, n: torch.Tensor) -> Ragged:
        """From a padded stack ``x [C, n_max, ...]``, ``y [C, n_max]`` and the sizes ``n [C]``."""
        n_host = n.cpu().long()
        keep = (torch.arange(x.shape[1]) < n_host[:, None]).flatten().to(x.device)
        flat_x, flat_y = x.flatten(0, 1)[keep], y.flatten()[keep]
        if not len(flat_y):  # no sample at all: one stored row, never read as a real one
            flat_x, flat_y = x.new_zeros((1, *x.shape[2:])), y.new_zeros(1)
        off = torch.cumsum(n_host, 0) - n_host
        return cls(flat_x, flat_y, n.to(x.device), off.to(x.device), n_host, off)

    @property
    def size(self) -> int:
        return len(self.n_host)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def rows(self, pos: torch.Tensor, clients: torch.Tensor | None = None) -> torch.Tensor:
        """Stored rows ``[R, k]`` (int64) of positions ``pos [R, k]`` of the clients at positions
        ``clients [R]`` (every client, in order, when ``None``), clamped into range."""
        off = self.offsets if clients is None else self.offsets.index_select(0, clients.long())
        return (pos + off[:, None]).clamp_(max=len(self.y) - 1)

    def gather(
        self, pos: torch.Tensor, clients: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x [R, k, ...], y [R, k])`` at positions ``pos`` (see :meth:`rows`)."""
        flat = self.rows(pos, clients).reshape(-1)
        x = self.x.index_select(0, flat).view(*pos.shape, *self.feature_shape)
        return x, self.y.index_select(0, flat).view(pos.shape)

    def padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The zero-padded stacks ``(x [C, n_max, ...], y [C, n_max])``."""
        pos = torch.arange(self.n_max, device=self.n.device).expand(self.size, -1)
        valid = pos < self.n[:, None]
        x, y = self.gather(pos)
        mask = valid.view(*valid.shape, *([1] * len(self.feature_shape)))
        return x.masked_fill_(~mask, 0), y.masked_fill_(~valid, 0)

    def select(self, rows: torch.Tensor) -> Ragged:
        """The clients at positions ``rows`` (a copy of their samples, end to end)."""
        n_host = self.n_host.index_select(0, rows.cpu())
        pos = torch.arange(int(n_host.max()) if len(n_host) else 0).expand(len(n_host), -1)
        keep = (pos < n_host[:, None]).flatten()
        flat = self.rows(pos.to(rows.device), rows.to(self.n.device)).flatten()[keep.to(rows.device)]
        if not len(flat):
            flat = flat.new_zeros(1)
        off = torch.cumsum(n_host, 0) - n_host
        dev = self.n.device
        x, y = self.x.index_select(0, flat), self.y.index_select(0, flat)
        return Ragged(x, y, n_host.to(dev), off.to(dev), n_host, off)

    def client_views(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each client's ``(x, y)`` as NumPy views of the stored rows (CPU only)."""
        xv, yv = self.x.numpy(), self.y.numpy()
        return [
            (xv[s : s + k], yv[s : s + k])
            for s, k in zip(self.offsets_host.tolist(), self.n_host.tolist(), strict=True)
        ]
