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


class SelectionDraws:
    """The ``selection`` maps of a fixed list of edges, round after round (:meth:`positions`): for
    each listed edge ``e`` (global id), ``d[e]`` distinct positions in ``0..m[e]-1``, one uniformly
    in each stratum ``[floor(k m/d), floor((k+1) m/d))`` of a ``0..m-1`` rotated by a uniform
    offset, concatenated edge after edge (``[sum d]`` int64). Every position is drawn with
    probability ``d/m``; integer arithmetic only. What does not depend on the round (the strata,
    the keys up to the round, the element counters' hashes) is computed once."""

    def __init__(
        self,
        seed: int,
        edges: np.ndarray,
        m: np.ndarray,
        d: np.ndarray,
        device: torch.device | str,
        stream: int = 1,
    ) -> None:
        e = torch.as_tensor(edges, dtype=torch.long, device=device)
        self.m = torch.as_tensor(m, dtype=torch.long, device=device)
        d_t = torch.as_tensor(d, dtype=torch.long, device=device)
        self.base = _base_keys(seed, e, stream=stream)  # (stream 1: the maps'; others: compressors')
        self.per_el = torch.repeat_interleave(torch.arange(len(e), device=device), d_t)
        first = torch.cumsum(d_t, 0) - d_t
        k = torch.arange(len(self.per_el), device=device) - first[self.per_el]  # stratum within its edge
        self.m_el, d_el = self.m[self.per_el], d_t[self.per_el]
        self.start = k * self.m_el // d_el
        self.size = (k + 1) * self.m_el // d_el - self.start
        self.counter_hash = _mix32((k + 1) * _GOLDEN + 1)  # hash_uniform32's counters k + 1
        self.offset_hash = int(_mix32(torch.tensor(1)))  # hash_uniform32 of counter 0: the rotation

    def positions(self, round_: int) -> torch.Tensor:
        """This round's positions (see the class docstring), :data:`HASH_CHUNK` elements at a time
        (temporaries that stay in the allocator's heap and the cache, at any number of edges)."""
        keys = _mix32(self.base ^ (round_ & _MASK32))
        offset = (_mix32(keys ^ self.offset_hash) * self.m) >> 32  # rotation per edge
        out = torch.empty_like(self.start)
        for s in range(0, len(out), HASH_CHUNK):
            part = slice(s, s + HASH_CHUNK)
            edge = self.per_el[part]
            u = _mix32_(keys[edge] ^ self.counter_hash[part])  # a fresh tensor: hashed in place
            x = u.mul_(self.size[part]).bitwise_right_shift_(32).add_(self.start[part]).add_(offset[edge])
            m = self.m_el[part]
            out[part] = torch.where(x >= m, x - m, x)  # x mod m: x < 2m (a stratum's end <= m, offset < m)
        return out


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
