"""Counter-based mini-batch streams: client ``c``'s ``k``-th draw is a function of ``(seed, c, k)``
alone (checked against splitmix64 written out in Python), whichever clients share the streams; the
state is one counter a client, round-trips, and an earlier version's state is refused draw for draw
but never replays batches."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from sheaf_fmtl.streams import BATCH, CounterStreams, draw_seeds, stream_seed

MASK = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def _oracle(seed: int, client: int, count: int, n: int) -> torch.Tensor:
    first = _splitmix(client ^ stream_seed(seed, BATCH, 0))
    gen = torch.Generator().manual_seed(_splitmix(first ^ count) >> 1)
    return torch.rand(n, generator=gen)


def test_draw_seeds_are_splitmix_of_the_client_and_its_count() -> None:
    ids, counts = np.array([0, 7, 123456]), np.array([0, 3, 2**33])
    want = [
        _splitmix(_splitmix(int(i) ^ stream_seed(4, BATCH, 0)) ^ int(k)) >> 1
        for i, k in zip(ids, counts, strict=True)
    ]
    assert draw_seeds(4, ids, counts).tolist() == want


def test_a_clients_draws_do_not_depend_on_who_shares_its_streams() -> None:
    alone, shared = CounterStreams(3, [7]), CounterStreams(3, [9, 7, 2])
    for k in range(3):
        mine = alone.keys([7], [5])[0]
        rows = shared.keys([2, 7], [4, 5])  # another client draws beside it, first
        assert torch.equal(mine, rows[1]) and torch.equal(mine, _oracle(3, 7, k, 5))
    assert shared.state() == {9: 0, 7: 3, 2: 3} and alone.state() == {7: 3}
    buf = torch.empty(5)
    shared.fill([7], [buf])  # in place: the same numbers as keys()
    assert torch.equal(buf, _oracle(3, 7, 3, 5))
    with pytest.raises(KeyError, match="client"):
        shared.fill([8], [buf])


def test_the_state_is_a_counter_a_client_and_round_trips() -> None:
    streams = CounterStreams(0, range(1000))
    streams.keys([1, 2], [3, 3])
    state = streams.state()
    assert state[1] == 1 and state[0] == 0 and len(pickle.dumps(state)) < 20_000  # 5 MB as generators
    after = streams.keys([1], [3])[0]
    fresh = CounterStreams(0, range(1000))
    fresh.load_state(state)
    assert torch.equal(fresh.keys([1], [3])[0], after)
    with pytest.raises(ValueError, match="client"):
        fresh.load_state({0: 0})


def test_an_earlier_versions_generator_states_warn_and_never_replay_a_batch() -> None:
    old = {c: torch.Generator().manual_seed(c).get_state() for c in range(3)}
    streams = CounterStreams(0, range(3))
    with pytest.warns(UserWarning, match="earlier sheaf-fmtl"):
        streams.load_state(old)
    assert all(v >= 2**32 for v in streams.state().values())
    assert not torch.equal(streams.keys([0], [4])[0], _oracle(0, 0, 0, 4))
