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


@pytest.mark.parametrize("bits", range(1, 18))
def test_pack_uint_matches_a_hand_built_bit_string_and_round_trips(bits: int) -> None:
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 2**bits, size=(3, 11))
    wire = pack_uint(torch.as_tensor(values), bits)
    for row, got in zip(values, wire.tolist(), strict=True):
        assert got == _naive_pack(row.tolist(), bits)
    assert torch.equal(unpack_uint(wire, 11, bits), torch.as_tensor(values))


def test_masks_match_a_hand_built_bit_string_and_round_trip() -> None:
    mask = torch.rand(4, 21) < 0.3
    wire = pack_mask(mask)
    assert wire.shape == (4, 3)
    for row, got in zip(mask.long().tolist(), wire.tolist(), strict=True):
        assert got == _naive_pack(row, 1)
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


@pytest.mark.parametrize("fraction, k", [(0.05, 10), (0.5, 100)])  # indices as a list, as a mask
def test_top_k_keeps_the_largest_magnitudes(fraction: float, k: int) -> None:
    x = torch.randn(6, 200)
    comp = make_compressor("top-k", fraction=fraction)
    assert index_bits(200, k)[0] == ("list" if k == 10 else "mask")
    got = comp.decode(comp.encode(x, Draw(0, 0, torch.arange(6))), 200, Draw(0, 0, torch.arange(6)))
    for row, out in zip(x, got, strict=True):
        keep = np.argsort(-np.abs(row.numpy()))[:k]
        dense = np.zeros(200, np.float32)
        dense[keep] = row.numpy()[keep]
        np.testing.assert_array_equal(out.numpy(), dense)


@pytest.mark.parametrize("name", ["rand-k", "rand-k-seeded"])
@pytest.mark.parametrize("fraction, k", [(0.05, 15), (0.5, 150)])  # rand-k's indices: a list, a mask
def test_random_selections_keep_k_values_differ_by_round_and_sender_and_are_redrawn(
    name: str, fraction: float, k: int
) -> None:
    d = 300
    x = torch.randn(4, d)
    draw = Draw(7, 3, torch.tensor([0, 1, 2, 9]))
    sender = make_compressor(name, fraction=fraction)
    wire = sender.encode(x, draw)
    receiver = make_compressor(name, fraction=fraction)  # a fresh object: only the wire and the draw
    out = receiver.decode(wire.clone(), d, Draw(7, 3, torch.tensor([0, 1, 2, 9])))
    assert torch.equal(out, sender.decode(wire, d, draw))
    kept = out != 0
    assert (kept.sum(1) == k).all()
    assert torch.equal(out[kept], x[kept])
    other = receiver.decode(receiver.encode(x, Draw(7, 4, draw.senders)), d, Draw(7, 4, draw.senders)) != 0
    assert not torch.equal(kept, other)
    assert not torch.equal(kept[0], kept[1])


@pytest.mark.parametrize("name", ["rand-k", "rand-k-seeded"])
def test_each_coordinate_is_kept_about_k_over_d_of_the_rounds(name: str) -> None:
    d, rounds, senders = 40, 40, 10  # 400 draws
    comp = make_compressor(name, fraction=0.25)
    x = torch.ones(senders, d)
    counts = torch.zeros(d)
    for r in range(rounds):
        draw = Draw(1, r, torch.arange(senders) + 5)
        counts += (comp.decode(comp.encode(x, draw), d, draw) != 0).float().sum(0)
    freq = counts / (rounds * senders)
    assert abs(float(freq.mean()) - 0.25) < 1e-6  # exactly k a round
    assert float((freq - 0.25).abs().max()) < 0.12  # each near k/d (binomial, 400 rounds)


def test_qsgd_levels_are_unbiased_before_rescaling() -> None:
    comp = make_compressor("qsgd", quantization_bits=2)  # s = 1: the coarsest
    torch.manual_seed(0)
    x = torch.randn(1, 50)
    tau = comp.tau(50)  # type: ignore[attr-defined]
    n = 2000  # 40 rounds of 50 senders, each its own draw of the roundings
    draws = torch.cat(
        [
            comp.decode(comp.encode(x.expand(50, -1), d := Draw(0, r, torch.arange(50))), 50, d)
            for r in range(40)
        ]
    )
    mean = draws.mean(0) * tau
    se = draws.std(0) * tau / math.sqrt(n)
    assert (((mean - x[0]).abs()) < 5 * se + 1e-6).all()
    levels = draws * tau / x.norm()
    assert torch.allclose(levels, levels.round(), atol=1e-5)
    assert set(torch.unique(levels.round()).tolist()) <= {-1.0, 0.0, 1.0}


def test_qsgd_levels_are_integers_within_s_and_travel_as_v_plus_s() -> None:
    comp = make_compressor("qsgd", quantization_bits=4)  # s = 7
    x = torch.randn(8, 100) * torch.rand(8, 1) * 10
    draw = Draw(2, 5, torch.arange(8))
    norm, v = comp.levels_of(x, draw)  # type: ignore[attr-defined]
    assert v.dtype == torch.long and int(v.abs().max()) <= 7 and int(v.abs().max()) >= 2
    assert ((v == 0) | (torch.sign(v) == torch.sign(x))).all()
    wire = comp.encode(x, draw)
    assert torch.equal(unpack_uint(wire[:, 4:], 100, 4), v + 7)
    assert torch.equal(wire[:, :4].contiguous().view(torch.float32), norm)


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


@pytest.mark.parametrize("fraction", [0.05, 0.5])  # indices as a list, as a mask
def test_a_zeroed_message_decodes_to_zero(fraction: float) -> None:
    """The bytes of a lost message, zeroed by the runtime (a mask with no bit set, a list of index
    0), decode to the zero vector for every compressor, on the receiver's draw."""
    d = 40
    for name in NAMES:
        comp = make_compressor(name, fraction=fraction)
        draw = Draw(0, 3, torch.tensor([2, 5]))
        wire = torch.zeros(2, comp.message_bits(d) // 8, dtype=torch.uint8)
        assert torch.equal(comp.decode(wire, d, draw), torch.zeros(2, d)), name


def test_make_compressor_refuses_what_it_cannot_build() -> None:
    assert set(COMPRESSORS) == set(NAMES)
    for name in ("powergossip", "none", "top_k"):
        with pytest.raises(ValueError, match="allowed: top-k, rand-k, rand-k-seeded, qsgd, sign"):
            make_compressor(name)
    for fraction in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            make_compressor("top-k", fraction=fraction)
    for bits in (1, 17):
        with pytest.raises(ValueError, match="2 to 16"):
            make_compressor("qsgd", quantization_bits=bits)
    assert make_compressor("rand-k", fraction=1.0).raw_bits(8) == 32 * 8 + 8  # the whole vector, a mask
