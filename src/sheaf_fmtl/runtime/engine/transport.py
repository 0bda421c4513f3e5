"""Transports carry payloads between clients and count the bits they actually carry.

Algorithms hand a transport ``{name: EdgeTensor | ServerTensor}`` and get back, under the same names:

- for an :class:`EdgeTensor` (one flat buffer per message kind, laid out per half-edge): what their
  neighbours sent along the reverse half-edges. Bits: the buffer, once.
- for a :class:`ServerTensor` (one row per client, for the star-with-a-server baselines): every
  client uplinks its row to a parameter server (which is not a client), the server takes the
  weighted average, and downlinks it to every client; each client receives that average as its row.
  Bits: the uplinked rows plus one downlinked copy of the average per client.

The in-process transport is one gather (or one weighted sum) per buffer; a multi-process one would
move the same buffers between ranks. Both hand what arrives to their :class:`~.faults.Faults`
(validation and simulated drops: ``EdgeTensor.heard``, server rows left out of the average); a
dropped message is not counted in the bits.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from ...messages import EdgeTensor, Payload, ServerTensor
from .faults import Faults, to_device


def payload_bits(t: torch.Tensor) -> int:
    """Bits of a payload tensor as transmitted: elements times the element width."""
    return t.numel() * t.element_size() * 8


class Transport(Protocol):
    bits: int
    faults: Faults  # validation, simulated drops and their counts (runtime/engine/faults.py)

    def exchange(self, payload: Payload) -> Payload: ...


def server_average(
    data: torch.Tensor, weights: torch.Tensor, accepted: torch.Tensor | None = None
) -> torch.Tensor:
    """``sum_k w_k data_k / sum_k w_k`` over the rows of ``data [N, d]`` -> ``[d]``; with ``accepted``
    (``[N]`` bool) over the accepted rows only (zero when none has weight)."""
    if data.dim() != 2 or weights.shape != data.shape[:1]:
        raise ValueError(
            f"server payload needs data [N, d] and weights [N]; got {tuple(data.shape)}, "
            f"{tuple(weights.shape)}"
        )
    w = weights.to(device=data.device, dtype=data.dtype)
    total = w.sum()
    ok = (total > 0) & (w >= 0).all()
    if w.device.type == "cpu":
        if not bool(ok):
            raise ValueError("server payload weights must be non-negative with a positive sum")
    else:  # reading ``ok`` would wait for the device every round: check it there instead
        torch._assert_async(ok)
    if accepted is not None:  # rejected or absent rows (perhaps NaN) are left out, not multiplied by 0
        w = torch.where(accepted, w, w.new_zeros(()))
        data = torch.where(accepted[:, None], data, data.new_zeros(()))
        total = w.sum()
        total = torch.where(total > 0, total, total.new_ones(()))
    return (w @ data) / total


class EdgeTransport:
    """What every transport does around moving the buffers: bit counts (by
    :meth:`Faults.sent_bits`), validation and simulated drops of what arrives
    (:meth:`Faults.accept`), and the server star's bookkeeping. Subclasses move an edge buffer
    (:meth:`_deliver`) and take a server average (:meth:`_via_server`)."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = Faults() if faults is None else faults
        self.bits = 0
        self.uplink_bits = 0  # server payloads only: clients -> server
        self.downlink_bits = 0  # server payloads only: server -> clients

    def exchange(self, payload: Payload) -> Payload:
        out: Payload = {}
        received: dict[str, EdgeTensor] = {}
        for name, item in payload.items():
            if isinstance(item, ServerTensor):
                out[name] = self._via_server(item)
                continue
            self.bits += self.faults.sent_bits(item.data, item.layout)
            received[name] = EdgeTensor(self._deliver(name, item), item.layout.reversed())
        out.update(self.faults.accept(received))
        return out

    def _deliver(self, name: str, item: EdgeTensor) -> torch.Tensor:
        """What arrives at every position of ``item.layout`` (its reverse half-edges' messages)."""
        raise NotImplementedError

    def _via_server(self, item: ServerTensor) -> ServerTensor:
        raise NotImplementedError

    def _server_rows(
        self, item: ServerTensor, avg: torch.Tensor, rows: int, reached: torch.Tensor, present: Any
    ) -> ServerTensor:
        """Count the star's bits (``rows`` clients up and down; absent clients send and receive
        nothing) and give every client the average, except one that receives none (absent, or no
        row accepted): it keeps its own row."""
        up, down = rows * payload_bits(item.data[0]), rows * payload_bits(avg)
        self.uplink_bits += up
        self.downlink_bits += down
        self.bits += up + down
        any_row = torch.as_tensor(reached)
        if present is not None:
            reached = reached & present
        rows_in = torch.where(torch.as_tensor(reached).view(-1, 1), avg.unsqueeze(0), item.data)
        return ServerTensor(rows_in, item.weights, avg, any_row)


class InProcessTransport(EdgeTransport):
    """All clients in one process: ``incoming[q] = outgoing[rev[q]]`` by one gather per edge buffer;
    one weighted sum per server buffer."""

    def _deliver(self, name: str, item: EdgeTensor) -> torch.Tensor:
        data, layout = item.data, item.layout
        if data.numel() != layout.total:  # rejected whole by Faults.accept
            return data
        return layout.exchange(data)

    def _via_server(self, item: ServerTensor) -> ServerTensor:
        accepted, present, rows = self.faults.server_rows(item.data)
        left_out = self.faults.left_out
        if left_out is not None and item.data.dim() == 2 and len(left_out) == len(item.data):
            # client sampling: the average over the participants' rows alone (the others send none)
            sent = to_device(np.flatnonzero(~left_out), item.data.device)
            avg = server_average(
                item.data.index_select(0, sent),
                item.weights.index_select(0, sent.to(item.weights.device)),
                accepted.index_select(0, sent),
            )
        else:
            avg = server_average(item.data, item.weights, accepted)
        reached = (item.weights.to(avg.device) * accepted).sum() > 0
        return self._server_rows(item, avg, rows, reached, present)
