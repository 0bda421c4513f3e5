"""Transports carry payloads between clients and count the bits they actually carry.

Algorithms hand a transport ``{name: EdgeTensor | ServerTensor}`` and get back, under the same names:

- for an :class:`EdgeTensor` (one flat buffer per message kind, laid out per half-edge): what their
  neighbours sent along the reverse half-edges. Bits: the buffer, once.
- for a :class:`ServerTensor` (one row per client, for the star-with-a-server baselines): every
  client uplinks its row to a parameter server (which is not a client), the server takes the
  weighted average, and downlinks it to every client; each client receives that average as its row.
  Bits: the uplinked rows plus one downlinked copy of the average per client.

The in-process transport is one gather (or one weighted sum) per buffer; a multi-process one would
move the same buffers between ranks.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch

from .edges import EdgeLayout


class EdgeTensor(NamedTuple):
    """A flat payload buffer and the half-edge layout it follows."""

    data: torch.Tensor
    layout: EdgeLayout


class ServerTensor(NamedTuple):
    """Rows to average at a parameter server: ``data [N, d]`` (row ``k`` from client ``k``) and
    non-negative aggregation ``weights [N]`` (e.g. sample counts), known to the server in advance and
    so not transmitted. What arrives is the same type, each row holding ``sum_k w_k data_k / sum_k w_k``
    (a read-only broadcast view; clone it before writing in place)."""

    data: torch.Tensor
    weights: torch.Tensor


Payload = dict[str, EdgeTensor | ServerTensor]


def payload_bits(t: torch.Tensor) -> int:
    """Bits of a payload tensor as transmitted: elements times the element width."""
    return t.numel() * t.element_size() * 8


class Transport(Protocol):
    bits: int

    def exchange(self, payload: Payload) -> Payload: ...


def server_average(data: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``sum_k w_k data_k / sum_k w_k`` over the rows of ``data [N, d]`` -> ``[d]``."""
    if data.dim() != 2 or weights.shape != data.shape[:1]:
        raise ValueError(f"server payload needs data [N, d] and weights [N]; got {tuple(data.shape)}, "
                         f"{tuple(weights.shape)}")
    w = weights.to(device=data.device, dtype=data.dtype)
    total = w.sum()
    ok = (total > 0) & (w >= 0).all()
    if w.device.type == "cpu":
        if not bool(ok):
            raise ValueError("server payload weights must be non-negative with a positive sum")
    else:  # reading ``ok`` would wait for the device every round: check it there instead
        torch._assert_async(ok)
    return (w @ data) / total


class InProcessTransport:
    """All clients in one process: ``incoming[q] = outgoing[rev[q]]`` by one gather per edge buffer;
    one weighted sum per server buffer."""

    def __init__(self) -> None:
        self.bits = 0
        self.uplink_bits = 0  # server payloads only: clients -> server
        self.downlink_bits = 0  # server payloads only: server -> clients

    def exchange(self, payload: Payload) -> Payload:
        out: Payload = {}
        for name, item in payload.items():
            if isinstance(item, ServerTensor):
                out[name] = self._via_server(item)
                continue
            data, layout = item
            if data.numel() != layout.total:
                raise ValueError(
                    f"payload {name!r} has {data.numel()} elements, layout expects {layout.total}"
                )
            self.bits += payload_bits(data)
            incoming = data.index_select(0, layout.exchange_index(data.device))
            out[name] = EdgeTensor(incoming, layout.reversed())
        return out

    def _via_server(self, item: ServerTensor) -> ServerTensor:
        avg = server_average(item.data, item.weights)
        up = payload_bits(item.data)
        down = item.data.shape[0] * payload_bits(avg)
        self.uplink_bits += up
        self.downlink_bits += down
        self.bits += up + down
        return ServerTensor(avg.unsqueeze(0).expand_as(item.data), item.weights)
