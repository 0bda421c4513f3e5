"""The ragged split (samples end to end) against the padded stack built by hand: gathers by
position, the padded view, the round trip from a padded stack, and a selection of clients."""

from __future__ import annotations

import numpy as np
import torch

from sheaf_fmtl.federation.ragged import Ragged

SIZES = [3, 0, 5, 1]


def _arrays() -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 2, 3)).astype(np.float32) for n in SIZES]
    ys = [rng.integers(0, 4, n) for n in SIZES]
    return xs, ys


def _padded_by_hand(xs: list[np.ndarray], ys: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = torch.zeros(len(xs), max(SIZES), 2, 3), torch.zeros(len(xs), max(SIZES), dtype=torch.long)
    for c, (a, b) in enumerate(zip(xs, ys, strict=True)):
        x[c, : len(a)], y[c, : len(b)] = torch.from_numpy(a), torch.from_numpy(b)
    return x, y


def test_gathers_and_the_padded_view_match_a_padded_stack_built_by_hand() -> None:
    xs, ys = _arrays()
    r = Ragged.of(xs, ys, (torch.float32, torch.long), torch.device("cpu"))
    x_ref, y_ref = _padded_by_hand(xs, ys)
    assert r.x.shape == (sum(SIZES), 2, 3) and r.n_max == 5 and r.feature_shape == (2, 3)
    x, y = r.padded()
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
    pos = torch.tensor([[2, 0], [0, 0], [4, 1], [0, 0]])
    gx, gy = r.gather(pos)
    valid = pos < r.n[:, None]
    for c in range(4):
        for k in range(2):
            if valid[c, k]:  # real samples: the client's own; padding reads some stored row
                assert torch.equal(gx[c, k], x_ref[c, pos[c, k]]) and gy[c, k] == y_ref[c, pos[c, k]]
    gx, gy = r.gather(pos[[2, 0]], torch.tensor([2, 0]))  # some clients, in any order
    assert torch.equal(gx[0, 0], x_ref[2, 4]) and torch.equal(gx[1, 0], x_ref[0, 2])
    for (a, b), xa, ya in zip(r.client_views(), xs, ys, strict=True):
        assert np.array_equal(a, xa) and np.array_equal(b, ya)
        assert not len(a) or np.shares_memory(a, r.x.numpy())  # (an empty view shares nothing)


def test_from_padded_and_select_keep_each_clients_samples() -> None:
    xs, ys = _arrays()
    x_ref, y_ref = _padded_by_hand(xs, ys)
    r = Ragged.from_padded(x_ref, y_ref, torch.tensor(SIZES))
    x, y = r.padded()
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref) and r.x.shape[0] == sum(SIZES)
    sub = r.select(torch.tensor([3, 0]))
    assert sub.n_host.tolist() == [1, 3] and sub.x.shape[0] == 4
    sx, sy = sub.padded()
    assert torch.equal(sx[0, :1], x_ref[3, :1]) and torch.equal(sx[1, :3], x_ref[0, :3])
    assert torch.equal(sy[1, :3], y_ref[0, :3])
    empty = Ragged.from_padded(x_ref[1:2], y_ref[1:2], torch.tensor([0]))  # no sample at all
    assert empty.n_max == 1 and empty.padded()[0].shape == (1, 1, 2, 3)
