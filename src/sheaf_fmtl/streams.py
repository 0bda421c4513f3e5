"""Random streams that belong to one client (or one half-edge), not to the process that holds it.

Every random draw of a run comes from a stream derived from ``seed`` and a global id, through
``SeedSequence([seed, kind, id])`` (the pattern of :meth:`sheaf_fmtl.federation.Cohort.init_thetas`):
a client's mini-batches and a half-edge's initial map are then the same whichever clients share its
process, so a run split over ranks draws the numbers of a run in one process.

Kinds: :data:`BATCH` (each client's mini-batch keys), :data:`MAP` (each half-edge's, or for shared
maps each edge's, initial map; :func:`sheaf_fmtl.sheaf.maps.init_maps`), :data:`STABILITY` (each
client's start row of the power iteration, :mod:`sheaf_fmtl.sheaf.stability`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .warn import warn

BATCH, MAP, STABILITY = 2, 3, 4  # stream kinds (7 and 8: per-client / common initial thetas)


def stream_seed(seed: int, kind: int, key: int) -> int:
    """A 63-bit seed for stream ``(seed, kind, key)``; distinct triples give independent streams."""
    return int(np.random.SeedSequence([seed, kind, key]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def stream(seed: int, kind: int, key: int) -> torch.Generator:
    """A CPU generator seeded for stream ``(seed, kind, key)``."""
    return torch.Generator().manual_seed(stream_seed(seed, kind, key))


class ClientStreams:
    """One CPU generator per client (global id) for its mini-batch keys (kind :data:`BATCH`).

    Drawing ``n_i`` keys for client ``i`` advances only client ``i``'s generator, so a client's
    batches do not depend on which other clients are stacked with it."""

    def __init__(self, seed: int, clients: Iterable[int]) -> None:
        self.seed = seed
        self.gens = {int(c): stream(seed, BATCH, int(c)) for c in clients}

    def keys(self, clients: Sequence[int], counts: Sequence[int]) -> list[torch.Tensor]:
        """Uniform keys ``[n_i]`` for each ``clients[k]`` with ``counts[k] = n_i`` (0: no draw)."""
        return [
            torch.rand(int(n), generator=self.gens[int(c)]) if n > 0 else torch.empty(0)
            for c, n in zip(clients, counts, strict=True)
        ]

    def fill(self, clients: Sequence[int], rows: Sequence[torch.Tensor]) -> None:
        """Draw each ``rows[k]`` (a contiguous tensor of ``n_k`` elements) in place from client
        ``clients[k]``'s stream: the numbers :meth:`keys` gives (``torch.rand`` is ``uniform_`` on a
        fresh tensor), without a new tensor per client and a concatenation (~2x faster a draw)."""
        gens = self.gens
        for c, r in zip(clients, rows, strict=True):
            r.uniform_(generator=gens[c])

    def state(self) -> dict[int, torch.Tensor]:
        """Every generator's state (``torch.Generator.get_state``), by client id."""
        return {c: g.get_state() for c, g in self.gens.items()}

    def load_state(self, state: dict[int, torch.Tensor]) -> None:
        """Restore :meth:`state`; a client missing from ``state`` is an error (ValueError)."""
        missing = sorted(set(self.gens) - {int(c) for c in state})
        if missing:
            raise ValueError(f"random state has no batch stream for client(s) {missing[:5]}")
        for c, g in self.gens.items():
            g.set_state(state[c])


class CounterStreams(ClientStreams):
    """Counter-based per-client mini-batch streams (kind :data:`BATCH`): client ``c``'s ``k``-th draw
    comes from a generator seeded by ``(seed, c, k)`` alone (:func:`draw_seeds`), so that its state
    is one counter a client (8 bytes, not a 5 KB generator) and one generator serves every client.

    As :class:`ClientStreams`: a draw for client ``c`` advances only ``c``'s counter, so a client's
    batches do not depend on which other clients share its process."""

    def __init__(self, seed: int, clients: Iterable[int]) -> None:  # (no generator per client)
        self.seed = seed
        self.ids = np.asarray(list(clients), np.int64)
        self.counts = np.zeros(len(self.ids), np.int64)
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]
        self._gen = torch.Generator()

    def _slots(self, clients: Sequence[int]) -> np.ndarray:
        """Positions in :attr:`ids` of ``clients`` (KeyError for one without a stream here)."""
        ids = np.asarray(clients, np.int64)
        at = np.minimum(np.searchsorted(self._sorted, ids), max(len(self._sorted) - 1, 0))
        known = self._sorted[at] == ids if len(self._sorted) else np.zeros(len(ids), bool)
        if not known.all():
            raise KeyError(f"no batch stream for client(s) {ids[~known][:5].tolist()}")
        return self._order[at]

    def keys(self, clients: Sequence[int], counts: Sequence[int]) -> list[torch.Tensor]:
        """Uniform keys ``[n_i]`` for each ``clients[k]`` with ``counts[k] = n_i`` (0: no draw)."""
        out = [torch.empty(int(n)) for n in counts]
        drawn = [k for k, n in enumerate(counts) if n > 0]
        self.fill([clients[k] for k in drawn], [out[k] for k in drawn])
        return out

    def fill(self, clients: Sequence[int], rows: Sequence[torch.Tensor]) -> None:
        """Draw each ``rows[k]`` in place: client ``clients[k]``'s next draw (its counter moved on)."""
        if not len(clients):
            return
        slots = self._slots(clients)
        seeds = draw_seeds(self.seed, self.ids[slots], self.counts[slots]).tolist()
        np.add.at(self.counts, slots, 1)
        gen = self._gen
        for s, r in zip(seeds, rows, strict=True):
            gen.manual_seed(s)
            r.uniform_(generator=gen)

    def state(self) -> dict[int, int]:  # type: ignore[override]
        """Every client's draw counter, by client id."""
        return dict(zip(self.ids.tolist(), self.counts.tolist(), strict=True))

    def load_state(self, state: dict[int, Any]) -> None:
        """Restore :meth:`state`; a client missing from ``state`` is an error (ValueError). A state
        of an earlier version (a generator's state per client) cannot be continued draw for draw:
        the run warns and draws afresh from counter ``2**32`` on, never replaying its earlier batches."""
        missing = sorted(set(self.ids.tolist()) - {int(c) for c in state})
        if missing:
            raise ValueError(f"random state has no batch stream for client(s) {missing[:5]}")
        values = [state[c] for c in self.ids.tolist()]
        if any(isinstance(v, torch.Tensor) and v.numel() > 1 for v in values):
            warn(
                "this checkpoint's mini-batch streams are generator states of an earlier sheaf-fmtl; "
                "the resumed run draws its batches afresh (they differ from an uninterrupted run's)"
            )
            self.counts[:] = 2**32
            return
        self.counts[:] = [int(v) for v in values]


def fill_keys(
    source: ClientStreams | torch.Generator, clients: Sequence[int], rows: Sequence[torch.Tensor]
) -> None:
    """Uniform keys in ``[0, 1)``, in place: each ``rows[k]`` drawn from client ``clients[k]``'s
    stream, or, given one generator (tests, fixed subsamples), from that generator row after row."""
    if isinstance(source, ClientStreams):
        source.fill(clients, rows)
        return
    for r in rows:
        r.uniform_(generator=source)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on ``uint64``."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out: np.ndarray = x ^ (x >> np.uint64(31))
        return out


def draw_seeds(seed: int, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """63-bit seeds, one per ``(id, count)``: the ``count``-th mini-batch draw of client ``id``
    (:class:`CounterStreams`), from ``(seed, id, count)`` alone: splitmix64 of the id under the key
    of stream ``(seed, BATCH, 0)``, then of that mixed with the count."""
    key = np.uint64(stream_seed(seed, BATCH, 0))
    first = _splitmix(np.asarray(ids, np.uint64) ^ key)
    return _splitmix(first ^ np.asarray(counts, np.uint64)) >> np.uint64(1)


def id_hashes(seed: int, kind: int, draw: int, ids: np.ndarray) -> np.ndarray:
    """64-bit hashes, one per id, of ``(seed, kind, draw, id)`` alone: splitmix64 of the id under the
    key of stream ``(seed, kind, draw)``, one vectorised hash for all ids (so a process holding some
    ids gets what a process holding all does)."""
    key = np.uint64(stream_seed(seed, kind, draw))
    return _splitmix(np.asarray(ids, np.uint64) ^ key)


def uniforms(seed: int, kind: int, round_: int, ids: np.ndarray) -> np.ndarray:
    """``U[0, 1)`` draws, one per id, from ``(seed, kind, round, id)`` alone (:func:`id_hashes`)."""
    return (id_hashes(seed, kind, round_, ids) >> np.uint64(11)).astype(np.float64) * 2.0**-53
