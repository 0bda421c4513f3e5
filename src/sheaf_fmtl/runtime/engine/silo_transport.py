"""The edge exchange over the silo links (``transport = tls``): what the distributed transport sends
in one all-to-all, as one frame per neighbour silo and payload, raw tensor bytes behind a typed
header (:mod:`..silonet.wire`), packed and unpacked by the same :class:`.distributed.ExchangePlan`.

A frame is checked against what the receiving silo expects from that neighbour at that step: the
round, the edges it carries (the payload's name and the undirected edge ids, :func:`..silonet.wire.edge_tag`),
the dtype and the length. A refused frame is never applied: its half-edge messages are not heard
(zeros, ``heard`` false, as a message the faults reject) and counted in ``rejected_messages``, as
are frames refused on arrival without a step to stand in for (:class:`..silonet.links.Mailbox`).

Sums and maxima (:meth:`all_sum`, :meth:`all_max`) go along the silos' spanning tree
(:mod:`..silonet.group`); server payloads (FedAvg & co.) are refused: the star's server is no silo.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch

from ...config import ConfigError
from ...messages import EdgeLayout, EdgeTensor, Payload, ServerTensor
from ...sheaf.graph import ClientGraph
from ...spelling import setting
from ..silonet.group import SiloGroup, check
from ..silonet.links import Refused
from ..silonet.wire import EDGE, Frame, edge_tag, encode
from .distributed import ExchangePlan, make_plan, remote_order
from .faults import Faults
from .shard import Shard
from .transport import EdgeTransport


@dataclass(frozen=True, eq=False)
class SiloPlan:
    """One layout's exchange on the links: the element plan, and per neighbour silo the undirected
    edges its frames carry (in order) and the positions of this layout they fill."""

    plan: ExchangePlan
    edges: dict[int, np.ndarray]
    positions: dict[int, np.ndarray]


class SiloTransport(EdgeTransport):
    """:class:`.transport.Transport` and :class:`sheaf_fmtl.messages.Comm` of one silo."""

    def __init__(
        self, shard: Shard, graph: ClientGraph, group: SiloGroup, faults: Faults | None = None
    ) -> None:
        super().__init__(faults)
        self.shard, self.graph, self.group = shard, graph, group
        group.round = lambda: self.faults.round
        self.sent_bytes = 0
        self._counted_refusals = 0
        self._refused: dict[str, np.ndarray] = {}
        self._plans: weakref.WeakKeyDictionary[EdgeLayout, dict[str, SiloPlan]] = weakref.WeakKeyDictionary()

    @property
    def collectives(self) -> int:
        return self.group.operations

    def _plan(self, layout: EdgeLayout, device: torch.device) -> SiloPlan:
        per = self._plans.setdefault(layout, {})
        if str(device) not in per:
            assert layout.half_edges is not None
            remote, peer = remote_order(layout, self.graph, self.shard)
            positions = {r: remote[peer == r] for r in self.group.neighbours}
            edges = {r: layout.half_edges[p] // 2 for r, p in positions.items()}
            per[str(device)] = SiloPlan(make_plan(layout, self.graph, self.shard, device), edges, positions)
        return per[str(device)]

    def _move(self, name: str, item: EdgeTensor) -> tuple[torch.Tensor, list[int]]:
        """What arrives at every position of ``item.layout``, and the neighbours whose frame was refused."""
        data, layout = item.data, item.layout
        silo = self._plan(layout, data.device)
        plan, group = silo.plan, self.group
        packed = data.index_select(0, plan.send).cpu()
        step = group.next_step()
        starts = np.concatenate([[0], np.cumsum(plan.send_splits)])
        frames = {}
        for r in sorted(group.neighbours):
            part = packed[int(starts[r]) : int(starts[r + 1])]
            tag = edge_tag(name, silo.edges[r])
            frames[r] = encode(group.header(EDGE, part, r, step, tag), part)
        sent = {r: group.links.send(r, f) for r, f in frames.items()}
        pieces, refused = [], []
        for r in range(self.shard.world):
            want = plan.recv_splits[r]
            if r not in group.neighbours:
                continue
            got = group.links.take(r, step)
            tag = edge_tag(name, silo.edges[r])
            why = (
                got.reason
                if isinstance(got, Refused)
                else _check_edge(got, self.faults.round, tag, data.dtype, want)
            )
            if why is None:
                assert isinstance(got, Frame)
                pieces.append(got.data)
            else:
                group.links.refusals.append(f"refused: frame of silo {r} for {name!r}: {why}")
                pieces.append(torch.zeros(want, dtype=data.dtype))
                refused.append(r)
        for r, s in sent.items():
            group.links.settle(r, s)
        self.sent_bytes += packed.numel() * packed.element_size()
        received = torch.cat(pieces) if pieces else data.new_empty(0).cpu()
        return torch.cat([data, received.to(data.device)]).index_select(0, plan.gather), refused

    def _deliver(self, name: str, item: EdgeTensor) -> torch.Tensor:
        if item.data.numel() != item.layout.total:
            raise ValueError(f"payload {name!r}: {item.data.numel()} elements, layout {item.layout.total}")
        out, refused = self._move(name, item)
        if refused:
            plan = self._plan(item.layout, item.data.device)
            self._refused[name] = np.concatenate([plan.positions[r] for r in refused])
        return out

    def exchange(self, payload: Payload) -> Payload:
        self._refused = {}
        out = super().exchange(payload)
        fresh = self.group.links.mailbox.refused_count() - self._counted_refusals
        if fresh:  # frames refused on arrival, with no step of theirs to stand in for
            self.faults.count_refused(fresh)
            self._counted_refusals += fresh
        if self._refused:
            out = self._withhold(out, np.unique(np.concatenate(list(self._refused.values()))))
        return out

    def _withhold(self, out: Payload, positions: np.ndarray) -> Payload:
        """``out`` with the messages at ``positions`` (from refused frames) not heard, and counted."""
        first = next(item for item in out.values() if isinstance(item, EdgeTensor))
        device = first.data.device
        heard = (
            first.heard
            if first.heard is not None
            else torch.ones(len(first.layout.sizes), dtype=torch.bool, device=device)
        )
        where = torch.as_tensor(positions, dtype=torch.long, device=device)
        self.faults.count_refused(int(heard[where].sum()))
        heard = heard.clone()
        heard[where] = False
        result: Payload = {}
        for name, item in out.items():
            if not isinstance(item, EdgeTensor):
                result[name] = item
                continue
            keep = heard.index_select(0, item.layout.element_positions(device))
            result[name] = EdgeTensor(
                torch.where(keep, item.data, item.data.new_zeros(())), item.layout, heard
            )
        return result

    def peek(self, payload: dict[str, EdgeTensor]) -> dict[str, EdgeTensor]:
        """An exchange for reporting only: no bits, no faults (a refused frame's values read NaN)."""
        out = {}
        for name, item in payload.items():
            data, refused = self._move(name, item)
            if refused and data.is_floating_point():
                plan = self._plan(item.layout, item.data.device)
                rev = item.layout.reversed()
                bad = torch.zeros(len(rev.sizes), dtype=torch.bool, device=data.device)
                bad[
                    torch.as_tensor(np.concatenate([plan.positions[r] for r in refused]), device=data.device)
                ] = True
                data = torch.where(bad.index_select(0, rev.element_positions(data.device)), torch.nan, data)
            out[name] = EdgeTensor(data, item.layout.reversed())
        return out

    def _via_server(self, item: ServerTensor) -> ServerTensor:
        raise ConfigError(
            "config key 'transport' = tls: this algorithm needs a parameter server, which is no silo; "
            f"the silo links carry neighbour exchanges only: use {setting('transport', 'gloo')}"
        )

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        return self.group.reduce(t, "sum")

    def all_max(self, t: torch.Tensor) -> torch.Tensor:
        return self.group.reduce(t, "max")


def _check_edge(frame: Frame, round_: int, tag: int, dtype: torch.dtype, length: int) -> str | None:
    """Why an edge frame is not the one expected (``None``: it is)."""
    why = check(frame, EDGE, round_, tag)
    if why is not None:
        return why
    if frame.header.dtype != dtype:
        return f"dtype {frame.header.dtype}, expected {dtype}"
    if frame.header.shape != (length,):
        return f"shape {list(frame.header.shape)}, expected [{length}]"
    return None
