"""Faults: received payloads validated, and simulated dropped clients and lost messages.

Both runtimes call this module; it decides nothing about an algorithm's mathematics:

- :func:`validate` checks one received edge buffer (shape, dtype, finite values per half-edge, on the
  device); :meth:`Faults.accept` applies it to every buffer of an exchange, ANDs it with the drop
  plan, zeroes what was not accepted and hands the mask on as :attr:`EdgeTensor.heard`. A neighbour
  whose message is rejected is treated as dropped for that exchange. On the CPU with nothing lost
  to the plan, one fused check per buffer comes first (:func:`intact_on_host`): when every buffer
  passes, they are handed on as they arrived with ``heard = None`` (the same numbers: an all-True
  mask zeroes nothing), far cheaper than the per-half-edge path (measured in benchmarks/README.md, School).
- :class:`DropPlan` (config keys ``drop_prob``, ``link_drop_prob``): in round ``k`` client ``i`` sits
  out with probability ``drop_prob`` (it sends nothing, receives nothing and keeps its state, see
  :meth:`Faults.hold`), and each directed link (graph half-edge ``i -> j``) is down with probability
  ``link_drop_prob`` (every message along it that round is lost). The draws derive from ``(seed,
  round, client or half-edge id)`` alone, so they do not depend on how clients share processes.
- Counts: ``rejected_messages`` (arrived but failed validation; accumulated on the device, read at an
  evaluation) and ``dropped_messages`` (lost to the plan; known on the host). A message is what one
  exchange carries along one half-edge (all its payload kinds together), or one client's row to or
  from the server. Dropped messages are not transmitted bits; rejected ones were transmitted.
- A :class:`~.schedule.Schedule` (``graph_schedule``, ``join_round``): an edge inactive this round or
  a client that has not joined yet is treated as lost or sitting out, sends nothing (no bits) and is
  not counted as a dropped message; the plan's faults apply on top of the round's active edges.
  A client that :class:`~.participation.Participation` (``clients_per_round``) did not draw this
  round is absent the same way (:attr:`Faults.left_out`).

A process holding some clients (a shard) builds ``Faults(plan, graph)`` on the whole graph, calls
:meth:`Faults.begin_round` each round, :meth:`Faults.sent_bits` on what it sends, :meth:`Faults.accept`
on what it received (laid out by its receiving layouts, whose ``half_edges`` are global ids),
:meth:`Faults.server_rows` with the global ids of its rows, and :meth:`Faults.hold` with its cohorts'
client ids. Each message is counted once, by its receiver: the counts of all processes add up to the
counts of one process holding every client.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...messages import EdgeLayout, EdgeTensor
from ...sheaf.graph import ClientGraph
from ...streams import uniforms

if TYPE_CHECKING:
    from ...config import RunConfig
    from .participation import Participation
    from .schedule import Schedule

CLIENT_OUT, LINK_DOWN = 11, 12  # stream kinds of the drop draws (see sheaf_fmtl.streams)


@dataclass(frozen=True)
class DropPlan:
    """Which clients sit out and which messages are lost in a round (see the module docstring)."""

    seed: int
    drop_prob: float = 0.0
    link_drop_prob: float = 0.0

    @classmethod
    def from_config(cls, config: RunConfig) -> DropPlan:
        """The plan of a :class:`~sheaf_fmtl.config.RunConfig` (keys ``drop_prob``, ``link_drop_prob``)."""
        return cls(config.seed, config.drop_prob, config.link_drop_prob)

    @property
    def active(self) -> bool:
        return self.drop_prob > 0 or self.link_drop_prob > 0

    def sitting_out(self, round_: int, clients: np.ndarray) -> np.ndarray:
        """``[len(clients)]`` bool: which of these (global ids) miss round ``round_``."""
        return uniforms(self.seed, CLIENT_OUT, round_, clients) < self.drop_prob

    def delivered(self, round_: int, graph: ClientGraph, half_edges: np.ndarray | None = None) -> np.ndarray:
        """``[len(half_edges)]`` bool (default: every half-edge): whether the messages along half-edge
        ``h = src -> dst`` arrive in round ``round_``: its link is up and both ends take part."""
        h = np.arange(graph.num_half_edges) if half_edges is None else np.asarray(half_edges, np.int64)
        gone = self.sitting_out(round_, graph.src[h]) | self.sitting_out(round_, graph.dst[h])
        delivered: np.ndarray = self.link_up(round_, h) & ~gone
        return delivered

    def link_up(self, round_: int, half_edges: np.ndarray) -> np.ndarray:
        """``[len(half_edges)]`` bool: which of these links (graph half-edge ids) are up in ``round_``."""
        return uniforms(self.seed, LINK_DOWN, round_, half_edges) >= self.link_drop_prob


def to_device(mask: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host mask (from the plan) on ``device``; to a GPU by a non-blocking copy, which does not
    wait for the device (the CUDA runtime stages pageable memory before it returns)."""
    t = torch.from_numpy(np.ascontiguousarray(mask))
    return t if device.type == "cpu" else t.to(device, non_blocking=True)


def validate(
    data: torch.Tensor, layout: EdgeLayout, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check a received edge buffer against the layout it should follow.

    Args:
        data: the received flat buffer.
        layout: the receiving layout (``layout.total`` elements, ``len(layout.sizes)`` half-edges).
        dtype: the expected element type (``None``: any floating-point type, or ``uint8``: the
            bytes of compressed messages).
    Returns:
        ``(buffer, ok)``: ``ok [H]`` bool on ``data``'s device, per half-edge, that its segment is
        finite; a buffer of the wrong shape or dtype is rejected whole (``ok`` all False, the buffer
        replaced by zeros of the right shape). One pass over the buffer and one ``index_add``; no
        host-device synchronisation.
    """
    h = len(layout.sizes)
    encoded = data.dtype == torch.uint8 and dtype in (None, torch.uint8)
    good_type = data.dtype == dtype if dtype is not None else data.is_floating_point() or encoded
    if data.dim() != 1 or data.numel() != layout.total or not good_type:
        zeros = torch.zeros(layout.total, dtype=dtype or torch.float32, device=data.device)
        return zeros, torch.zeros(h, dtype=torch.bool, device=data.device)
    if encoded:  # compressed messages: bytes of the right length are well formed (their decoder's)
        return data, torch.ones(h, dtype=torch.bool, device=data.device)
    if h and bool((layout.sizes == layout.sizes[0]).all()):  # equal segments: a [H, d] view
        # x * 0 is 0 for a finite x and NaN otherwise; on the CPU ~9x faster than isfinite().all(1)
        return data, torch.isfinite((data.view(h, -1) * 0).sum(1))
    where = layout.element_positions(data.device)
    bad = data.new_zeros(h).index_add_(0, where, data * 0)  # NaN where a segment is not finite
    return data, torch.isfinite(bad)


def intact_on_host(received: Mapping[str, EdgeTensor]) -> bool:
    """Whether every buffer is on the CPU, of its layout's shape, floating-point and finite
    throughout, by one fused check per buffer: its sum is finite exactly when every element is
    (NaN and infinities propagate), and a sum that overflows on finite values only sends the buffer
    to the per-half-edge check (:func:`validate`). The sum is read on the host, which is free on the
    CPU; on a GPU it would wait for the device every exchange, so device buffers always take
    :func:`validate`'s path."""
    for item in received.values():
        data = item.data
        if data.device.type != "cpu" or data.dim() != 1 or data.numel() != item.layout.total:
            return False
        if data.dtype == torch.uint8:  # encoded bytes (compressed messages): any value is well formed
            continue
        if not data.is_floating_point() or not math.isfinite(float(data.sum())):
            return False
    return True


class Faults:
    """One run's (or one rank's) faults: the drop plan, the current round, and the counts.

    Call :meth:`begin_round` at the start of each round; the transport calls :meth:`sent_bits`,
    :meth:`accept` (edge payloads) and :meth:`server_rows` (server payloads); the runtime
    calls :meth:`hold` at the end of the round. Without a graph or an active plan nothing is
    dropped, but every payload is still validated."""

    def __init__(
        self,
        plan: DropPlan | None = None,
        graph: ClientGraph | None = None,
        schedule: Schedule | None = None,
        participation: Participation | None = None,
    ) -> None:
        self.plan = plan if plan is not None and plan.active and graph is not None else None
        self.schedule = schedule if graph is not None else None
        self.participation = participation if graph is not None else None
        self.left_out: np.ndarray | None = None  # [N] not drawn to take part this round (None: all are)
        self.graph = graph
        self.round = 0
        self.dropped = 0
        self._rejected: torch.Tensor | int = 0
        self._delivered: np.ndarray | None = None  # [2E] this round, None: everything arrives
        self._lost: np.ndarray | None = None  # [2E] scheduled this round but lost to the plan
        self._out: np.ndarray | None = None  # [N] clients sitting this round out, None: none
        self._out_plan: np.ndarray | None = None  # [N] those of them the plan drew (not absent)
        self._out_kept: np.ndarray | None = None  # [N] those of them not left out by sampling alone
        self._pending: np.ndarray | None = None  # [N] the participants whose edge masks are not drawn yet

    # -- the round ---------------------------------------------------------------------------
    def begin_round(self, round_: int | None = None) -> None:
        """Draw round ``round_`` (default: the one after the last) of the plan."""
        self.round = self.round + 1 if round_ is None else round_
        g = self.graph
        self.left_out = self.participation.left_out(self.round) if self.participation else None
        self._pending = None
        if (self.plan is None and self.schedule is None and self.left_out is None) or g is None:
            return
        if self.plan is None and self.schedule is None:  # client sampling alone
            self._sampled_only(g)
            return
        r, n, h = self.round, g.num_nodes, g.num_half_edges
        plan_out = self.plan.sitting_out(r, np.arange(n)) if self.plan else np.zeros(n, bool)
        link_up = self.plan.link_up(r, np.arange(h)) if self.plan else np.ones(h, bool)
        active = self.schedule.active(r) if self.schedule else None
        absent = self.schedule.absent(r) if self.schedule else None
        kept = plan_out if absent is None else plan_out | absent  # out for a fault or not joined yet
        self._out_kept = kept if kept.any() else None
        if self.left_out is not None:  # not drawn this round: absent, as a client yet to join
            absent = self.left_out if absent is None else absent | self.left_out
        scheduled = np.ones(h, bool) if active is None else active  # what would be sent without faults
        if absent is not None:
            scheduled = scheduled & ~absent[g.src] & ~absent[g.dst]
        self._delivered = scheduled & link_up & ~plan_out[g.src] & ~plan_out[g.dst]
        self._lost = scheduled & ~self._delivered
        self._out_plan = plan_out if plan_out.any() else None
        out = plan_out if absent is None else plan_out | absent
        self._out = out if out.any() else None

    def _sampled_only(self, g: ClientGraph) -> None:
        """A round of client sampling alone: the participants' edges are delivered, nothing is lost
        (the edge masks are drawn when an exchange first asks: a server's round never does)."""
        assert self.left_out is not None
        keep = ~self.left_out
        self._delivered, self._lost = None, None
        self._pending = keep
        self._out_plan = self._out_kept = None
        self._out = self.left_out

    def _masks(self) -> None:
        """The pending round's edge masks (:meth:`_sampled_only`), drawn on first use."""
        if self._pending is not None and self.graph is not None:
            keep, g = self._pending, self.graph
            self._delivered = keep[g.src] & keep[g.dst]
            self._lost = np.zeros(g.num_half_edges, bool)
            self._pending = None

    def sitting_out(self) -> np.ndarray | None:
        """``[N]`` bool: the clients that miss this round (``None``: none)."""
        return self._out

    def _ids(self, layout: EdgeLayout) -> np.ndarray:
        return np.arange(len(layout.sizes)) if layout.half_edges is None else layout.half_edges

    def sent(self, layout: EdgeLayout) -> np.ndarray | None:
        """``[H]`` bool per sending position: its message arrives (``None``: all do)."""
        self._masks()
        return None if self._delivered is None else self._delivered[self._ids(layout)]

    def heard(self, layout: EdgeLayout) -> np.ndarray | None:
        """``[H]`` bool per receiving position ``i -> j``: ``j``'s message along ``j -> i`` arrives."""
        self._masks()
        if self._delivered is None or self.graph is None:
            return None
        heard: np.ndarray = self._delivered[self.graph.rev[self._ids(layout)]]
        return heard

    def sent_bits(self, data: torch.Tensor, layout: EdgeLayout) -> int:
        """Bits put on the wire for ``data`` laid out by ``layout``: dropped messages excluded."""
        sent = self.sent(layout)
        if sent is None or data.numel() != layout.total:
            return data.numel() * data.element_size() * 8
        return int(layout.sizes[sent].sum()) * data.element_size() * 8

    # -- receiving ---------------------------------------------------------------------------
    def accept(self, received: Mapping[str, EdgeTensor]) -> dict[str, EdgeTensor]:
        """Validate the buffers of one exchange (all on the same half-edge positions), drop what the
        plan loses, zero what is not accepted and set ``heard`` on each; count both."""
        if not received:
            return {}
        first = next(iter(received.values())).layout
        heard = self.heard(first)
        if heard is None and intact_on_host(received):  # the usual case: passed on untouched
            return {name: EdgeTensor(item.data, item.layout) for name, item in received.items()}
        checked = {name: validate(item.data, item.layout) for name, item in received.items()}
        ok = torch.stack([fine for _, fine in checked.values()]).all(0)
        if heard is not None:
            assert self._lost is not None and self.graph is not None
            self.dropped += int(self._lost[self.graph.rev[self._ids(first)]].sum())
            lost = to_device(~heard, ok.device)
            self._count(ok | lost)
            ok = ok & ~lost
        else:
            self._count(ok)
        out = {}
        for name, (data, _) in checked.items():
            layout = received[name].layout
            keep = ok.index_select(0, layout.element_positions(ok.device))
            out[name] = EdgeTensor(torch.where(keep, data, data.new_zeros(())), layout, ok)
        return out

    def server_rows(
        self, data: torch.Tensor, clients: np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """A server's uplink ``data [n, d]`` from ``clients`` (global ids; default ``0..n-1``):
        ``(accepted [n] bool, present [n] bool or None, rows sent)``; a non-finite row is rejected,
        an absent client's row never arrives."""
        out, drawn = self._out, self._out_plan
        if out is not None and clients is not None:
            out = out[clients]
            drawn = None if drawn is None else drawn[clients]
        if out is None or data.dim() != 2:
            ok = torch.isfinite(data).all(1) if data.dim() == 2 else torch.zeros(len(data), dtype=torch.bool)
        else:  # the rows that arrive alone are checked (a round of a few of many clients: a few rows)
            sent = to_device(np.flatnonzero(~out), data.device)
            ok = torch.zeros(len(data), dtype=torch.bool, device=data.device)
            ok.index_copy_(0, sent, torch.isfinite(data.index_select(0, sent)).all(1))
        if out is None:
            self._count(ok)
            return ok, None, len(data)
        self.dropped += 0 if drawn is None else 2 * int(drawn.sum())  # its uplink and its downlink
        present = to_device(~out, data.device)
        self._count(ok | ~present)
        return ok & present, present, int((~out).sum())

    def count_refused(self, messages: int) -> None:
        """Count ``messages`` refused by the transport itself (a frame that failed its checks)."""
        self._rejected = self._rejected + messages

    def _count(self, accepted_or_lost: torch.Tensor) -> None:
        self._rejected = self._rejected + (~accepted_or_lost).sum()

    # -- the end of the round -----------------------------------------------------------------
    def hold(self, state: Any, before: Mapping[str, Any], rows: Sequence[np.ndarray]) -> None:
        """Put back, for the clients that sat this round out, the rows of every per-client field
        (``state.client_rows``: a list of per-cohort stacks, or one stack) as they were at the start
        of the round (``before``, from :meth:`snapshot`). ``rows[c]``: the global client id of each
        row of cohort ``c``'s stack (``Cohort.clients``; a shard holds some clients only). The fields
        of ``state.server_rows`` (a server's model every client holds) are put back only for the
        clients out for a fault or not joined: one not drawn by client sampling takes the server's."""
        if self._out is None:
            return
        following = getattr(state, "server_rows", ())
        for name, old in before.items():
            out = self._out_kept if name in following else self._out
            if out is None:
                continue
            new = getattr(state, name)
            if new is None:  # a field this run does not use (e.g. no compressor's copies)
                continue
            if isinstance(new, list) and not new:
                continue  # e.g. no optimizer state (plain SGD)
            if isinstance(old, list) and not old:  # created this round (the optimizer's): from zeros
                old = [torch.zeros_like(n) for n in new]
            stacks = new if isinstance(new, list) else [new]
            olds = old if isinstance(old, list) else [old]
            held = []
            for ids, n, o in zip(rows, stacks, olds, strict=True):
                keep = to_device(out[ids], n.device).view(-1, *[1] * (n.dim() - 1))
                held.append(torch.where(keep, o, n))
            setattr(state, name, held if isinstance(new, list) else held[0])

    def hold_stats(self, before: Sequence[tuple[Any, Mapping[str, torch.Tensor]]]) -> None:
        """Put back the BatchNorm statistics of the clients that sat this round out: ``before`` pairs
        each cohort that has them (``Cohort.norms``) with its statistics at the start of the round
        (replaced by training, never written in place)."""
        out = self._out
        if out is None:
            return
        for cohort, old in before:
            new = cohort.norms.stats
            keep = to_device(out[cohort.clients], next(iter(new.values())).device)
            cohort.norms.stats = {
                k: torch.where(keep.view(-1, *[1] * (v.dim() - 1)), old[k], v) for k, v in new.items()
            }

    def snapshot(self, state: Any) -> dict[str, Any]:
        """References to the per-client fields at the start of a round (empty when no client sits
        it out: nothing to hold). Algorithms replace these tensors, never write them in place."""
        if self._out is None:
            return {}
        return {name: getattr(state, name) for name in getattr(state, "client_rows", ("thetas",))}

    # -- counts ------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """``rejected_messages`` and ``dropped_messages`` so far (reads the device counter)."""
        return {"rejected_messages": int(self._rejected), "dropped_messages": self.dropped}

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint keeps to resume the same draws and counts."""
        return {"round": self.round, **self.counts()}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.round = int(state["round"])
        self.dropped = int(state["dropped_messages"])
        self._rejected = int(state["rejected_messages"])
