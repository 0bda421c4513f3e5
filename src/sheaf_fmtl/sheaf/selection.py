"""Restriction maps that are never stored: coordinate selections (and small dense projections)
drawn each round from ``(seed, edge, round)``, over the part of two models an edge couples.

An edge ``e = {i, j}`` couples a *support*: ``m_e`` coordinates of ``theta_i`` paired, position by
position, with ``m_e`` coordinates of ``theta_j`` (:class:`Support`; the whole model when both have
``d`` parameters, the weights of shared features, or shared parameter slices). A round's map is
``P_ij = S_(e,t) Pi_i`` and ``P_ji = S_(e,t) Pi_j``, ``Pi`` the support's selection and ``S`` a
``d_e x m_e`` matrix both ends regenerate from the seed:

- ``selection``: ``d_e`` distinct support positions, one in each of ``d_e`` equal strata of a
  randomly rotated ``0..m_e-1`` (so each position is drawn with probability exactly ``d_e / m_e``;
  O(d_e) integer work per edge, the same bits on every device): ``E[S^T S] = (d_e/m_e) I``;
- ``orthonormal``: rows of a Haar-random orthonormal ``d_e x m_e`` matrix (QR of a Gaussian),
  ``E[S^T S] = (d_e/m_e) I``;
- ``gaussian``: i.i.d. ``N(0, 1/m_e)`` entries, ``E[S^T S] = (d_e/m_e) I``.

The random numbers come from a counter-based integer hash of ``(seed, edge, round, element)``
(:func:`hash_uniform32`), so a map depends on nothing but its edge's global id and the round: the
two ends of an edge, and any split of the clients over processes, draw the same one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .coordinate_rows import DrawnRows

MAP_KINDS = ("selection", "orthonormal", "gaussian")
_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
#: Elements hashed at once by :meth:`SelectionDraws.positions` (int64 temporaries of 4 MiB).
HASH_CHUNK = 1 << 19


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """Wellons' ``lowbias32`` integer hash on int64 tensors holding 32-bit values (products wrap in
    int64 but only their low 32 bits are kept, so the result is exact on every device)."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """:func:`_mix32` in place on ``x`` (a temporary the caller owns): the same values, fewer
    allocations."""
    x.bitwise_and_(_MASK32)
    x ^= x >> 16
    x.mul_(0x7FEB352D).bitwise_and_(_MASK32)
    x ^= x >> 15
    x.mul_(0x846CA68B).bitwise_and_(_MASK32)
    x ^= x >> 16
    return x


def _base_keys(seed: int, edges: torch.Tensor, stream: int) -> torch.Tensor:
    """``[E]`` keys of ``(seed, stream, edge)``, before the round is mixed in."""
    k = _mix32(torch.full_like(edges, (seed & _MASK32) ^ _GOLDEN))
    k = _mix32(k ^ ((seed >> 32) & _MASK32))
    k = _mix32(k ^ stream)
    return _mix32(k ^ (edges & _MASK32))


def edge_keys(seed: int, edges: torch.Tensor, round_: int, stream: int) -> torch.Tensor:
    """``[E]`` 32-bit keys of ``(seed, stream, edge, round)`` (int64 tensors holding 32-bit values)."""
    return _mix32(_base_keys(seed, edges, stream) ^ (round_ & _MASK32))


def hash_uniform32(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """32-bit random integers (int64 holding ``0 .. 2^32-1``) for element ``counters`` of the
    streams ``keys`` (broadcast together)."""
    return _mix32(keys ^ _mix32(counters * _GOLDEN + 1))


@dataclass(frozen=True, eq=False)
class Support:
    """What each held half-edge couples, in message-buffer order: half-edge ``q`` (``i -> j``) owns
    ``m[q]`` positions; ``index[offsets[q] : offsets[q] + m[q]]`` are the coordinates of ``theta_i``
    at those positions (``index is None``: every support is the whole model, position = coordinate).
    The reverse half-edge lists ``theta_j``'s coordinates for the same positions."""

    m: np.ndarray  # [H] support size per held half-edge
    index: torch.Tensor | None = None  # [sum m] coordinates into the source's theta
    offsets: np.ndarray | None = None  # [H]

    @classmethod
    def whole(cls, dims: np.ndarray) -> Support:
        """Every half-edge couples the whole model (``dims[q] = d_i = d_j``)."""
        return cls(np.asarray(dims, np.int64))

    @classmethod
    def from_lists(cls, lists: list[np.ndarray], device: torch.device | str = "cpu") -> Support:
        """Explicit coordinate lists, one per held half-edge in buffer order."""
        m = np.array([len(a) for a in lists], np.int64)
        flat = np.concatenate(lists) if lists else np.zeros(0, np.int64)
        offsets = np.zeros(len(m), np.int64)
        offsets[1:] = np.cumsum(m)[:-1]
        return cls(m, torch.as_tensor(flat, dtype=torch.long, device=device), offsets)


@dataclass(frozen=True, eq=False)
class _Shape:
    """The distinct edges of one ``(m, d)``: their base keys, and the per-stratum numbers every
    round shares (stratum starts and sizes, the hashed counters ``k + 1``)."""

    m: int
    d: int
    base: torch.Tensor  # [E_s] keys of (seed, stream, edge)
    start: torch.Tensor  # [d] first position of each stratum
    size: torch.Tensor  # [d] positions in each stratum
    counter: torch.Tensor  # [d] hash of counter k + 1 (hash_uniform32's inner mix)


class SelectionDraws:
    """The ``selection`` maps of a fixed list of edges, round after round (:meth:`positions`): for
    each listed edge ``e`` (global id), ``d[e]`` distinct positions in ``0..m[e]-1``, one uniformly
    in each stratum ``[floor(k m/d), floor((k+1) m/d))`` of a ``0..m-1`` rotated by a uniform
    offset, concatenated edge after edge (``[sum d]``). Every position is drawn with probability
    ``d/m``; integer arithmetic only. The distinct edges are drawn once a round, grouped by ``(m,
    d)`` as ``[E_s, d]`` blocks (the strata's numbers broadcast, no per-element index), and each
    listed edge's row copied from its block."""

    def __init__(
        self,
        seed: int,
        edges: np.ndarray,
        m: np.ndarray,
        d: np.ndarray,
        device: torch.device | str,
        stream: int = 1,
    ) -> None:
        rows = np.stack([np.asarray(edges), np.asarray(m), np.asarray(d)], 1).astype(np.int64).reshape(-1, 3)
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)  # the two half-edges of an edge: once
        inverse = inverse.reshape(-1)
        shapes, shape_of = np.unique(unique[:, 1:], axis=0, return_inverse=True)
        shape_of = shape_of.reshape(-1)
        self.device = torch.device(device)
        self.total = int(rows[:, 2].sum())
        self.shapes: list[_Shape] = []
        within = np.zeros(len(unique), np.int64)  # a distinct edge's row in its shape's block
        for s, (m_s, d_s) in enumerate(shapes.tolist()):
            members = np.flatnonzero(shape_of == s)
            within[members] = np.arange(len(members))
            k = torch.arange(d_s, dtype=torch.long, device=self.device)
            start = k * m_s // d_s
            edge_ids = torch.as_tensor(unique[members, 0], dtype=torch.long, device=self.device)
            self.shapes.append(
                _Shape(
                    m_s,
                    d_s,
                    _base_keys(seed, edge_ids, stream=stream),
                    start,
                    (k + 1) * m_s // d_s - start,
                    _mix32((k + 1) * _GOLDEN + 1),
                )
            )
        # the listed rows in runs of consecutive rows of one shape: (shape, first element, block rows)
        shape_of_row, row_in_shape = shape_of[inverse], within[inverse]
        firsts = np.concatenate([[0], np.cumsum(rows[:, 2])[:-1]]).astype(np.int64)
        cuts = np.flatnonzero(np.diff(shape_of_row)) + 1 if len(rows) else np.zeros(0, np.int64)
        self.runs = [
            (int(shape_of_row[a]), int(firsts[a]), torch.as_tensor(row_in_shape[a:b], device=self.device))
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True)
            if b > a
        ]
        self.shape_of_row, self.row_in_shape = shape_of_row, row_in_shape
        self.offset_hash = int(_mix32(torch.tensor(1)))  # hash_uniform32 of counter 0: the rotation
        self._rows: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}

    def blocks(self, round_: int, dtype: torch.dtype = torch.long) -> list[torch.Tensor]:
        """This round's ``[E_s, d]`` positions of each shape's distinct edges (:meth:`rows` reads
        the listed rows from them), :data:`HASH_CHUNK` elements hashed at a time."""
        return [self._drawn(shape, round_, dtype) for shape in self.shapes]

    def rows(
        self, lo: int, hi: int, blocks: list[torch.Tensor], offset: torch.Tensor | None = None
    ) -> DrawnRows:
        """The listed rows ``lo .. hi - 1`` (all of one ``(m, d)``) as rows of ``blocks``, plus a
        per-row ``offset`` (:class:`~sheaf_fmtl.sheaf.coordinate_rows.DrawnRows`)."""
        if (lo, hi) not in self._rows:
            shapes = np.unique(self.shape_of_row[lo:hi])
            if len(shapes) > 1:
                raise ValueError(f"rows {lo}..{hi - 1} have {len(shapes)} shapes (m, d); one was expected")
            at = torch.as_tensor(self.row_in_shape[lo:hi], device=self.device)
            self._rows[(lo, hi)] = (int(shapes[0]) if len(shapes) else -1, at)
        s, at = self._rows[(lo, hi)]
        if s < 0:  # no rows
            return DrawnRows(torch.zeros(0, 1, dtype=torch.int32, device=self.device), at, offset)
        return DrawnRows(blocks[s], at, offset)

    def positions(self, round_: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
        """This round's positions of every listed row (see the class docstring), ``[sum d]``.
        ``dtype``: the positions' (``torch.int32`` halves them)."""
        blocks = self.blocks(round_, dtype)
        out = torch.empty(self.total, dtype=dtype, device=self.device)
        for s, first, rows in self.runs:
            d = self.shapes[s].d
            torch.index_select(blocks[s], 0, rows, out=out[first : first + len(rows) * d].view(len(rows), d))
        return out

    def _drawn(self, shape: _Shape, round_: int, dtype: torch.dtype) -> torch.Tensor:
        """``[E_s, d]``: the positions of one shape's distinct edges."""
        keys = _mix32(shape.base ^ (round_ & _MASK32))
        offset = (_mix32(keys ^ self.offset_hash) * shape.m) >> 32  # rotation per edge
        out = torch.empty((len(keys), shape.d), dtype=dtype, device=self.device)
        step = max(1, HASH_CHUNK // max(1, shape.d))
        for lo in range(0, len(keys), step):
            part = slice(lo, lo + step)
            u = _mix32_(keys[part, None] ^ shape.counter)  # hash_uniform32(key, k + 1)
            x = u.mul_(shape.size).bitwise_right_shift_(32).add_(shape.start).add_(offset[part, None])
            out[part] = torch.where(x >= shape.m, x - shape.m, x)  # x mod m: x < 2m
        return out


def position_dtype(largest: int) -> torch.dtype:
    """The narrowest integer dtype of positions ``0 .. largest - 1`` within a model (``int16`` up to
    2^15 coordinates, then ``int32``, ``int64``): a round's blocks of positions in half the bytes of
    ``int32`` for models of up to 32,768 parameters."""
    for dtype in (torch.int16, torch.int32):
        if largest <= torch.iinfo(dtype).max + 1:
            return dtype
    return torch.long


def selection_positions(
    seed: int, edges: np.ndarray, round_: int, m: np.ndarray, d: np.ndarray, device: torch.device | str
) -> torch.Tensor:
    """Round ``round_``'s positions of :class:`SelectionDraws` (one round; see there)."""
    return SelectionDraws(seed, edges, m, d, device).positions(round_)


def dense_maps(
    kind: str, seed: int, edges: np.ndarray, round_: int, d_e: int, m: int, device: torch.device | str
) -> torch.Tensor:
    """This round's ``orthonormal`` or ``gaussian`` maps ``S [E, d_e, m]`` of the listed edges (one
    shape): Gaussian entries from the counter hash (Box-Muller in float64), orthonormal rows from
    their QR factorisation (sign-fixed so that ``R`` has a positive diagonal)."""
    e = torch.as_tensor(edges, dtype=torch.long, device=device)
    keys = edge_keys(seed, e, round_, stream=2)[:, None]
    n = d_e * m
    counters = torch.arange(2 * n, device=device)[None, :]
    u = (hash_uniform32(keys, counters).double() + 0.5) / 2.0**32  # in (0, 1)
    g = torch.sqrt(-2.0 * torch.log(u[:, :n])) * torch.cos(2.0 * torch.pi * u[:, n:])
    g = g.view(len(e), m, d_e)  # columns of S^T
    if kind == "gaussian":
        out: torch.Tensor = (g / m**0.5).transpose(1, 2).float()
        return out
    if kind != "orthonormal":
        raise ValueError(f"unknown map kind {kind!r}; allowed: {', '.join(MAP_KINDS)}")
    q, r = torch.linalg.qr(g)  # [E, m, d_e]
    q = q * torch.sign(torch.diagonal(r, dim1=1, dim2=2)).unsqueeze(1)
    rows: torch.Tensor = q.transpose(1, 2).float()
    return rows
