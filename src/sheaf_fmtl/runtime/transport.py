"""Transports carry payloads between clients and count the bits they actually carry.

Algorithms hand a transport ``{name: EdgeTensor}`` (one flat buffer per message kind, laid out per
half-edge) and get back what their neighbours sent along the reverse half-edges. The in-process
transport is one gather per buffer; a multi-process one would move the same buffers between ranks.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from .edges import EdgeLayout


class EdgeTensor(NamedTuple):
    """A flat payload buffer and the half-edge layout it follows."""

    data: torch.Tensor
    layout: EdgeLayout


Payload = dict[str, EdgeTensor]


def payload_bits(t: torch.Tensor) -> int:
    """Bits of a payload tensor as transmitted: elements times the element width."""
    return t.numel() * t.element_size() * 8


class Transport(Protocol):
    bits: int

    def exchange(self, payload: Payload) -> Payload: ...


class InProcessTransport:
    """All clients in one process: ``incoming[q] = outgoing[rev[q]]`` by one gather per buffer."""

    def __init__(self) -> None:
        self.bits = 0

    def exchange(self, payload: Payload) -> Payload:
        out: Payload = {}
        for name, (data, layout) in payload.items():
            if data.numel() != layout.total:
                raise ValueError(f"payload {name!r} has {data.numel()} elements, layout expects {layout.total}")
            self.bits += payload_bits(data)
            out[name] = EdgeTensor(data[layout.exchange_index(data.device)], layout.reversed())
        return out
