"""The compressor protocol, the draws a random compressor depends on, and the registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from ..component_keys import Keys, declare_keys, key
from ..sheaf.stalks import edge_dim

#: The values of the config key ``compressor``: ``none`` (whole models) and ``powergossip``
#: (low-rank differences) are handled by the algorithms, the others are registered here.
COMPRESSOR_NAMES = ("none", "top-k", "rand-k", "rand-k-seeded", "qsgd", "sign", "powergossip")


@dataclass(frozen=True)
class Draw:
    """What a random compressor's draws depend on: the run's seed, the round, and the global client
    id of each row (its sender), so a receiver on any process draws what the sender drew."""

    seed: int
    round: int
    senders: torch.Tensor  # [M] int64


class Compressor(Protocol):
    """``C``: one vector per row in, the bytes that travel out, and back (CHOCO-SGD's compression
    operator, ``E||C(x) - x||^2 <= (1 - omega) ||x||^2``)."""

    name: str

    def raw_bits(self, d: int) -> int:
        """Bits of one message for a ``d``-vector by the compressor's formula."""
        ...

    def message_bits(self, d: int) -> int:
        """Bits on the wire: :meth:`raw_bits` padded to whole bytes."""
        ...

    def omega(self, d: int) -> float:
        """The compressor's quality ``omega`` in ``(0, 1]``."""
        ...

    def encode(self, x: torch.Tensor, draw: Draw) -> torch.Tensor:
        """``x [M, d]`` float -> ``[M, message_bits(d) // 8]`` uint8."""
        ...

    def decode(self, wire: torch.Tensor, d: int, draw: Draw) -> torch.Tensor:
        """``[M, bytes]`` uint8 -> ``C(x) [M, d]`` float32, as every receiver (and the sender) rebuilds it."""
        ...


def padded(bits: int) -> int:
    """``bits`` rounded up to whole bytes."""
    return 8 * ((bits + 7) // 8)


def kept(d: int, fraction: float) -> int:
    """Values a sparsifier keeps of ``d``: ``max(1, floor(fraction d))``, the rule of the sheaf's edge
    spaces (``d_ij = max(1, floor(gamma d))``, :func:`sheaf_fmtl.sheaf.stalks.edge_dim`)."""
    return edge_dim(fraction, d, d)


C = TypeVar("C")
#: compressor name -> its class, built as ``cls(fraction=..., quantization_bits=...)``.
COMPRESSORS: dict[str, Callable[..., Compressor]] = {}


def register(name: str) -> Callable[[C], C]:
    """Class decorator: ``make_compressor(name, ...)`` builds it."""

    def deco(cls: C) -> C:
        COMPRESSORS[name] = cls  # type: ignore[assignment]
        return cls

    return deco


def make_compressor(name: str, *, fraction: float = 0.1, quantization_bits: int = 4) -> Compressor:
    """The compressor ``name`` with its parameters (ValueError naming the allowed values)."""
    if name not in COMPRESSORS:
        allowed = ", ".join(n for n in COMPRESSOR_NAMES if n in COMPRESSORS)
        what = "is handled by the algorithms, not" if name in COMPRESSOR_NAMES else "is not"
        raise ValueError(f"compressor {name!r} {what} a message compressor; allowed: {allowed}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"compression = {fraction}: the kept fraction must lie in (0, 1]")
    if not 2 <= quantization_bits <= 16:
        raise ValueError(f"quantization_bits = {quantization_bits}: allowed 2 to 16")
    return COMPRESSORS[name](fraction=fraction, quantization_bits=quantization_bits)


@declare_keys("compressor", selector="compressor")
@dataclass(frozen=True)
class CompressionKeys(Keys):
    """The compressors' own keys (``compressor`` picks one)."""

    compression: float = key(
        0.1,
        "`top-k`, `rand-k`, `rand-k-seeded`: kept fraction, `k = max(1, floor(compression d))` values.",
        rule="0 < compression <= 1",
        readers=("top-k", "rand-k", "rand-k-seeded"),
    )
    quantization_bits: int = key(
        4,
        "`qsgd`: bits per coordinate (a sign and `2^(b-1) - 1` levels), plus one norm per message.",
        rule="2 <= quantization_bits <= 16",
        readers=("qsgd",),
    )
    rank: int = key(
        1,
        "`powergossip`: rank of each weight matrix's approximated difference.",
        rule="rank >= 1",
        readers=("powergossip",),
    )
    consensus_step: float | None = key(
        None,
        "With a `compressor`: the consensus step `gamma` of the copies (CHOCO-SGD's), scaling the pull "
        "towards them (D-PSGD: `x_i += gamma sum_j w_ij (xhat_j - xhat_i)`; dFedU: its coupling step times "
        "gamma); `null`: half the stability limit of the compressor's quality `omega`, "
        "`2 omega / (2 - omega)` over the step's largest eigenvalue, at most 1 (1 for `powergossip`). "
        "summary.json's `consensus_step` says what ran.",
        rule="consensus_step > 0",
        readers=tuple(n for n in COMPRESSOR_NAMES if n != "none"),
    )
