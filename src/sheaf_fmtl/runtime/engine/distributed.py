"""The transport between processes, on ``torch.distributed`` (Gloo on the CPU, NCCL on CUDA).

Each rank holds a shard of the clients (:mod:`.shard`) and lays its payloads out over its own
outgoing half-edges (:class:`sheaf_fmtl.messages.EdgeLayout` with ``half_edges`` and ``rev = -1``
for a reverse half-edge held elsewhere). An exchange of one payload kind is:

- same-rank messages: one local gather, as in one process;
- cross-rank messages: ONE ``all_to_all_single`` on a buffer packed per peer rank. Both ends order
  the messages of a pair of ranks by the id of their undirected edge, so what rank ``a`` packs for
  ``b`` is in the order ``b`` unpacks it; split sizes and gather indices are computed once per
  layout (:class:`ExchangePlan`). Gloo implements ``all_to_all_single`` with uneven splits on CPU
  tensors (torch 2.x), so no point-to-point operations are needed;
- server payloads (FedAvg & co.): one ``all_reduce`` of ``[sum_k w_k x_k, sum_k w_k]`` over the
  rows that arrived (a client's drop draw by its global id, :meth:`.faults.Faults.server_rows`).

Bits are counted per rank from the payloads it sends, exactly as :class:`.transport.InProcessTransport`
counts them; their sum over ranks (:meth:`Simulation.transmitted_bits`) is the one-process total.
Received payloads pass through the same :class:`.faults.Faults` (validation, simulated drops).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ...messages import EdgeLayout, EdgeTensor, ServerTensor, element_index
from ...sheaf.graph import ClientGraph
from .faults import Faults
from .shard import Shard
from .transport import EdgeTransport


@dataclass(frozen=True, eq=False)
class ExchangePlan:
    """Index work of one layout's exchange, computed once: ``send`` (elements packed for the peers,
    peer after peer), the split sizes, and ``gather`` over ``cat([outgoing, received])``."""

    send: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]
    gather: torch.Tensor


def remote_order(layout: EdgeLayout, graph: ClientGraph, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
    """The positions of ``layout`` whose reverse half-edge is held elsewhere, by peer rank, then by
    undirected edge id (the order both ends of a pair of ranks pack their messages in), and each
    one's peer rank."""
    assert layout.half_edges is not None
    h = layout.half_edges
    remote = np.flatnonzero(layout.rev < 0)
    peer = shard.owner[graph.dst[h[remote]]]
    remote = remote[np.lexsort((h[remote] // 2, peer))]  # by peer rank, then by undirected edge id
    return remote, shard.owner[graph.dst[h[remote]]]


def make_plan(layout: EdgeLayout, graph: ClientGraph, shard: Shard, device: torch.device) -> ExchangePlan:
    """The :class:`ExchangePlan` of ``layout`` on rank ``shard.rank`` (see the module docstring)."""
    assert layout.rev_sizes is not None
    remote, peer = remote_order(layout, graph, shard)
    send = element_index(layout.offsets[remote], layout.sizes[remote])
    count = np.bincount(peer, weights=layout.sizes[remote], minlength=shard.world).astype(np.int64)
    got = np.bincount(peer, weights=layout.rev_sizes[remote], minlength=shard.world).astype(np.int64)
    start = np.where(layout.rev >= 0, layout.offsets[np.maximum(layout.rev, 0)], 0)
    recv_start = np.zeros(len(remote), np.int64)
    if len(remote):
        recv_start[1:] = np.cumsum(layout.rev_sizes[remote])[:-1]
    start[remote] = layout.total + recv_start
    gather = element_index(start, layout.rev_sizes)
    send_t = torch.as_tensor(send, dtype=torch.long, device=device)
    gather_t = torch.as_tensor(gather, dtype=torch.long, device=device)
    return ExchangePlan(send_t, count.tolist(), got.tolist(), gather_t)


class DistributedTransport(EdgeTransport):
    """:class:`.transport.Transport` and :class:`sheaf_fmtl.messages.Comm` of one rank."""

    def __init__(self, shard: Shard, graph: ClientGraph, faults: Faults | None = None) -> None:
        super().__init__(faults)
        self.shard, self.graph = shard, graph
        self.collectives = 0  # per rank, for the scaling numbers (benchmarks/README.md)
        self.sent_bytes = 0  # bytes this rank put into collectives
        self._plans: weakref.WeakKeyDictionary[EdgeLayout, dict[str, ExchangePlan]] = (
            weakref.WeakKeyDictionary()
        )

    # -- edges ---------------------------------------------------------------------------------
    def _plan(self, layout: EdgeLayout, device: torch.device) -> ExchangePlan:
        per = self._plans.setdefault(layout, {})
        if str(device) not in per:
            per[str(device)] = make_plan(layout, self.graph, self.shard, device)
        return per[str(device)]

    def _move(self, item: EdgeTensor) -> torch.Tensor:
        """What arrives at every position of ``item.layout``: local gathers and one all-to-all."""
        data, layout = item.data, item.layout
        plan = self._plan(layout, data.device)
        packed = data.index_select(0, plan.send)
        received = data.new_empty(sum(plan.recv_splits))
        wire = _wire(packed)
        back = _wire(received)
        dist.all_to_all_single(back, wire, plan.recv_splits, plan.send_splits)
        self.collectives += 1
        self.sent_bytes += packed.numel() * packed.element_size()
        received = back.to(data.device)
        return torch.cat([data, received]).index_select(0, plan.gather)

    def _deliver(self, name: str, item: EdgeTensor) -> torch.Tensor:
        # a mis-shaped buffer cannot be split between the peers (they would wait for ever)
        if item.data.numel() != item.layout.total:
            raise ValueError(f"payload {name!r}: {item.data.numel()} elements, layout {item.layout.total}")
        return self._move(item)

    def peek(self, payload: dict[str, EdgeTensor]) -> dict[str, EdgeTensor]:
        """An exchange for reporting only (the sheaf energy, a penalty): no bits, no faults."""
        return {name: EdgeTensor(self._move(item), item.layout.reversed()) for name, item in payload.items()}

    # -- server and reductions -------------------------------------------------------------------
    def _via_server(self, item: ServerTensor) -> ServerTensor:
        # a server baseline holds one cohort: its rows are this rank's clients, ascending
        accepted, present, rows = self.faults.server_rows(item.data, self.shard.clients)
        w = torch.where(accepted, item.weights.to(item.data), item.data.new_zeros(()))
        data = torch.where(accepted[:, None], item.data, item.data.new_zeros(()))
        parts = self.all_sum(torch.cat([w @ data, w.sum().view(1)]))
        total = parts[-1]
        avg = parts[:-1] / torch.where(total > 0, total, total.new_ones(()))
        return self._server_rows(item, avg, rows, total > 0, present)

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, dist.ReduceOp.SUM)

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        return self._reduce(t, dist.ReduceOp.MAX)

    def _reduce(self, t: torch.Tensor, op: Any) -> torch.Tensor:
        buf = _wire(t.detach().clone())
        dist.all_reduce(buf, op=op)
        self.collectives += 1
        return buf.to(t.device)


def _wire(t: torch.Tensor) -> torch.Tensor:
    """``t`` where the backend can send it: CUDA for NCCL, the CPU for Gloo."""
    if dist.get_backend() == "nccl":
        return t if t.is_cuda else t.cuda()
    return t.cpu() if t.is_cuda else t
