"""Redrawn selections read a chunk of rows at a time (:mod:`sheaf_fmtl.sheaf.coordinate_rows`):
the rows built from the draw's blocks equal the whole positions, gathers and scatters by chunks
equal one pass, and a round by chunks of one row equals a round by large chunks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf import coordinate_rows
from sheaf_fmtl.sheaf.coordinate_rows import add_at, gather_at
from sheaf_fmtl.sheaf.selection import SelectionDraws, position_dtype


def _draws() -> tuple[SelectionDraws, np.ndarray]:
    edges = np.repeat(np.array([3, 8, 1, 4, 9]), 2)  # both half-edges of each edge
    m, d = np.full(10, 40), np.full(10, 6)
    return SelectionDraws(2, edges, m, d, "cpu"), d


@pytest.mark.parametrize("dtype", [torch.long, torch.int32])
def test_rows_of_the_blocks_equal_the_positions_with_their_offsets(dtype: torch.dtype) -> None:
    draws, d = _draws()
    whole = draws.positions(4, dtype).view(10, 6)
    offset = torch.arange(10, dtype=dtype) * 40
    rows = draws.rows(2, 9, draws.blocks(4, dtype), offset[2:9])
    assert len(rows) == 7
    torch.testing.assert_close(rows[0:7], whole[2:9] + offset[2:9, None])
    torch.testing.assert_close(rows[3:5], whole[5:7] + offset[5:7, None])
    assert rows[0:7].dtype == dtype
    assert len(draws.rows(3, 3, draws.blocks(4, dtype))) == 0


@pytest.mark.parametrize("offset_dtype", [torch.long, torch.int32, None])
def test_int16_blocks_give_the_positions_in_the_offsets_dtype(offset_dtype: torch.dtype | None) -> None:
    draws, _ = _draws()
    whole = draws.positions(4, torch.long).view(10, 6)
    blocks = draws.blocks(4, torch.int16)
    assert blocks[0].dtype == torch.int16
    offset = None if offset_dtype is None else torch.arange(10, dtype=offset_dtype) * 40_000  # past int16
    rows = draws.rows(0, 10, blocks, offset)
    expected = whole if offset is None else whole + offset[:, None].long()
    got = rows[1:8]
    assert got.dtype == (torch.int32 if offset is None else offset_dtype)  # an index dtype
    assert torch.equal(got.long(), expected[1:8])


@pytest.mark.parametrize(
    ("largest", "dtype"), [(1, torch.int16), (2**15, torch.int16), (2**15 + 1, torch.int32)]
)
def test_position_dtype_is_the_narrowest_that_holds_every_position(largest: int, dtype: torch.dtype) -> None:
    assert position_dtype(largest) == dtype
    assert position_dtype(2**31 + 1) == torch.long


def test_rows_of_two_shapes_are_refused() -> None:
    draws = SelectionDraws(2, np.array([1, 2]), np.array([40, 30]), np.array([6, 6]), "cpu")
    with pytest.raises(ValueError, match="2 shapes"):
        draws.rows(0, 2, draws.blocks(0))


def test_gather_and_add_by_chunks_of_rows_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    flat = torch.randn(400, generator=g)
    coords = torch.randint(0, 400, (9, 5), generator=g)  # repeated positions accumulate
    values = torch.randn(9, 5, generator=g)
    want_gather = flat[coords]
    want_add = flat.clone().index_put_((coords.reshape(-1),), values.reshape(-1), accumulate=True)
    for elements in (1, 7, 1 << 20):
        monkeypatch.setattr(coordinate_rows, "ROW_ELEMENTS", elements)
        torch.testing.assert_close(gather_at(flat, coords, 5), want_gather)
        got = flat.clone()
        add_at(got, coords, values)
        torch.testing.assert_close(got, want_add)


@pytest.mark.parametrize("local_steps", [1, 3])
def test_a_round_by_chunks_of_one_row_equals_one_by_large_chunks(
    local_steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(With one step the coupling residual is written over the messages received; with three the
    messages received serve every step.)"""
    config = RunConfig(
        dataset="synthetic",
        clients=12,
        rounds=3,
        graph_degree=4,
        maps="redrawn",
        local_epochs=0,
        local_steps=local_steps,
    )

    def thetas() -> torch.Tensor:
        sim = build_simulation(config)
        for _ in range(3):
            sim.step()
        return torch.cat([t.reshape(-1) for t in sim.state.thetas])

    large = thetas()
    monkeypatch.setattr(coordinate_rows, "ROW_ELEMENTS", 1)
    torch.testing.assert_close(thetas(), large, rtol=0, atol=0)
