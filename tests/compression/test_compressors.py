"""The compressors against independent oracles: bit streams built by hand in Python, dense top-k,
the draws a receiver makes again, QSGD's unbiasedness, every compressor's contraction, and the
wire's length against the bit formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sheaf_fmtl.compression import COMPRESSORS, Draw, index_bits, make_compressor
from sheaf_fmtl.compression.bitpack import pack_mask, pack_uint, unpack_mask, unpack_uint

NAMES = ("top-k", "rand-k", "rand-k-seeded", "qsgd", "sign")


def _naive_pack(values: list[int], bits: int) -> list[int]:
    """A bit string written character by character, least significant bit first, cut in bytes."""
    stream = "".join(format(v, f"0{bits}b")[::-1] for v in values)
    stream += "0" * (-len(stream) % 8)
    return [int(stream[i : i + 8][::-1], 2) for i in range(0, len(stream), 8)]


@pytest.mark.parametrize("bits", [1, 3, 7, 8, 10, 13, 17])
def test_pack_uint_matches_a_hand_built_bit_string_and_round_trips(bits: int) -> None:
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 2**bits, size=(3, 11))
    wire = pack_uint(torch.as_tensor(values), bits)
    for row, got in zip(values, wire.tolist(), strict=True):
        assert got == _naive_pack(row.tolist(), bits)
    assert torch.equal(unpack_uint(wire, 11, bits), torch.as_tensor(values))


def test_masks_round_trip() -> None:
    mask = torch.rand(4, 21) < 0.3
    wire = pack_mask(mask)
    assert wire.shape == (4, 3)
    assert torch.equal(unpack_mask(wire, 21), mask)


def test_index_encoding_is_the_cheaper_by_hand() -> None:
    assert index_bits(610, 6) == ("list", 60)
    assert index_bits(610, 61) == ("list", 610)  # a tie goes to the list
    assert index_bits(610, 100) == ("mask", 610)
    assert index_bits(1, 1) == ("list", 0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("d", [1, 7, 610, 1000])
def test_wire_length_is_the_formula(name: str, d: int) -> None:
    comp = make_compressor(name, fraction=0.05, quantization_bits=3)
    k = max(1, math.floor(0.05 * d + 1e-9))
    listed = min(k * math.ceil(math.log2(d)) if d > 1 else 0, d)
    raw = {
        "top-k": 32 * k + listed,
        "rand-k": 32 * k + listed,
        "rand-k-seeded": 32 * k,
        "qsgd": 32 + 3 * d,
        "sign": 32 + d,
    }[name]
    assert comp.raw_bits(d) == raw
    assert comp.message_bits(d) == 8 * math.ceil(raw / 8)
    wire = comp.encode(torch.randn(5, d), Draw(0, 1, torch.arange(5)))
    assert wire.dtype == torch.uint8 and wire.shape == (5, comp.message_bits(d) // 8)


def test_top_k_keeps_the_largest_magnitudes() -> None:
    x = torch.randn(6, 200)
    comp = make_compressor("top-k", fraction=0.05)
    got = comp.decode(comp.encode(x, Draw(0, 0, torch.arange(6))), 200, Draw(0, 0, torch.arange(6)))
    for row, out in zip(x, got, strict=True):
        keep = np.argsort(-np.abs(row.numpy()))[:10]
        dense = np.zeros(200, np.float32)
        dense[keep] = row.numpy()[keep]
        np.testing.assert_array_equal(out.numpy(), dense)


@pytest.mark.parametrize("name", ["rand-k", "rand-k-seeded"])
def test_random_selections_keep_k_values_differ_by_round_and_sender_and_are_redrawn(name: str) -> None:
    d, k = 300, 15
    x = torch.randn(4, d)
    draw = Draw(7, 3, torch.tensor([0, 1, 2, 9]))
    wire = make_compressor(name, fraction=0.05).encode(x, draw)
    receiver = make_compressor(name, fraction=0.05)  # a fresh object: only the wire and the draw
    out = receiver.decode(wire.clone(), d, Draw(7, 3, torch.tensor([0, 1, 2, 9])))
    kept = out != 0
    assert (kept.sum(1) == k).all()
    assert torch.equal(out[kept], x[kept])
    other = receiver.decode(receiver.encode(x, Draw(7, 4, draw.senders)), d, Draw(7, 4, draw.senders)) != 0
    assert not torch.equal(kept, other)
    assert not torch.equal(kept[0], kept[1])


@pytest.mark.parametrize("name", ["rand-k", "rand-k-seeded"])
def test_each_coordinate_is_kept_about_k_over_d_of_the_rounds(name: str) -> None:
    d, rounds = 40, 400
    comp = make_compressor(name, fraction=0.25)
    x = torch.ones(1, d)
    counts = torch.zeros(d)
    for r in range(rounds):
        draw = Draw(1, r, torch.tensor([5]))
        counts += (comp.decode(comp.encode(x, draw), d, draw)[0] != 0).float()
    freq = counts / rounds
    assert abs(float(freq.mean()) - 0.25) < 1e-6  # exactly k a round
    assert float((freq - 0.25).abs().max()) < 0.12  # each near k/d (binomial, 400 rounds)


def test_qsgd_levels_are_unbiased_before_rescaling() -> None:
    comp = make_compressor("qsgd", quantization_bits=2)  # s = 1: the coarsest
    torch.manual_seed(0)
    x = torch.randn(1, 50)
    tau = comp.tau(50)  # type: ignore[attr-defined]
    draws = torch.stack(
        [
            comp.decode(comp.encode(x, Draw(0, r, torch.tensor([0]))), 50, Draw(0, r, torch.tensor([0])))[0]
            for r in range(3000)
        ]
    )
    mean = draws.mean(0) * tau
    se = draws.std(0) * tau / math.sqrt(3000)
    assert (((mean - x[0]).abs()) < 5 * se + 1e-6).all()
    levels = torch.unique((draws * tau / x.norm()).round())
    assert set(levels.tolist()) <= {-1.0, 0.0, 1.0}


@pytest.mark.parametrize("name", NAMES)
def test_every_compressor_contracts_by_its_omega(name: str) -> None:
    comp = make_compressor(name, fraction=0.1, quantization_bits=4)
    x = torch.randn(400, 256)
    draw = Draw(3, 0, torch.arange(400))
    err = ((comp.decode(comp.encode(x, draw), 256, draw) - x) ** 2).sum(1).mean()
    assert float(err) <= (1 - comp.omega(256)) * float((x**2).sum(1).mean()) * 1.02


def test_sign_decodes_to_plus_or_minus_its_scale() -> None:
    comp = make_compressor("sign")
    x = torch.tensor([[1.0, -2.0, 0.0, 3.0]])
    out = comp.decode(comp.encode(x, Draw(0, 0, torch.tensor([0]))), 4, Draw(0, 0, torch.tensor([0])))
    assert out.tolist() == [[1.5, -1.5, 1.5, 1.5]]


def test_zero_rows_decode_to_zero() -> None:
    for name in NAMES:
        comp = make_compressor(name, fraction=0.2)
        draw = Draw(0, 0, torch.tensor([0]))
        assert (comp.decode(comp.encode(torch.zeros(1, 30), draw), 30, draw) == 0).all()


def test_make_compressor_refuses_what_it_cannot_build() -> None:
    assert set(COMPRESSORS) == set(NAMES)
    with pytest.raises(ValueError, match="allowed"):
        make_compressor("powergossip")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        make_compressor("top-k", fraction=1.5)
    with pytest.raises(ValueError, match="2 to 16"):
        make_compressor("qsgd", quantization_bits=1)
