"""Message compressors for compressed gossip: each encodes one vector per client and round into
the bytes that travel (``torch.uint8``), with an exact bit count, and decodes them as every
receiver does. One compressor per small file, behind :class:`.base.Compressor` and a registry;
``none`` and ``powergossip`` are names of the ``compressor`` key that the algorithms handle
themselves (whole models; low-rank differences)."""

from __future__ import annotations

from . import qsgd, randk, randk_seeded, sign, topk  # noqa: F401 - fills the registry
from .base import COMPRESSOR_NAMES, COMPRESSORS, Compressor, Draw, kept, make_compressor
from .bitpack import index_bits

__all__ = ["COMPRESSORS", "COMPRESSOR_NAMES", "Compressor", "Draw", "index_bits", "kept", "make_compressor"]
