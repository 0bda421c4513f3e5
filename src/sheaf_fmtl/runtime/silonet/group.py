"""The operations of a run over the silo links besides the edge exchange: sums and maxima over every
silo, gathers to silo 0 and the start-up all-gather, carried along a spanning tree of the silos'
graph (so no silo talks to a silo that is not its neighbour).

The tree: breadth-first from silo 0, neighbours in ascending order. A reduction sends each silo's own
tensor up the tree unchanged (a silo forwards its subtree's tensors, by rank); silo 0 combines them
from the last rank down, ``t_0 + (t_1 + (... + (t_{K-2} + t_{K-1})))``, and the result travels
down. The order is fixed and does not depend on the tree; it is the order Gloo's all-reduce adds a
buffer of one number in (as the sheaf energy: measured for 2 to 5 ranks with the pinned torch).
Gloo's ring adds the other chunks of a longer buffer starting from other ranks, so such a buffer
whose entries several silos add to can differ from Gloo's in the last bits; a sum where each entry
comes from one silo (the per-client metrics) is exact in any order.

Every operation takes the next ``step`` (every silo performs the same operations in the same order);
a frame is checked against what the step expects (its kind, sender, round and tag) and refused
otherwise, which ends the run: a reduction cannot go on without a silo's part.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from .links import Refused, SiloLinkError, SiloLinks
from .wire import DOWN, UP, Frame, Header, edge_tag, encode, pack_tensors, unpack_tensors

_OPS = {name: edge_tag(name, np.zeros(0, np.int64)) for name in ("sum", "max", "gather", "json")}


def silo_graph(owner: np.ndarray, src: np.ndarray, dst: np.ndarray, world: int) -> list[set[int]]:
    """Each silo's neighbour silos: the silos holding a client adjacent to one of its clients."""
    adj: list[set[int]] = [set() for _ in range(world)]
    for a, b in zip(owner[src].tolist(), owner[dst].tolist(), strict=True):
        if a != b:
            adj[a].add(b)
    return adj


def spanning_tree(adj: list[set[int]]) -> tuple[list[int], list[list[int]]]:
    """``(parent, children)`` of the breadth-first tree from silo 0 (``parent[0] = -1``); ValueError
    when the silos' graph is not connected."""
    parent = [-2] * len(adj)
    parent[0] = -1
    children: list[list[int]] = [[] for _ in adj]
    queue = deque([0])
    while queue:
        v = queue.popleft()
        for w in sorted(adj[v]):
            if parent[w] == -2:
                parent[w] = v
                children[v].append(w)
                queue.append(w)
    if -2 in parent:
        raise ValueError(f"silo {parent.index(-2)} is not connected to silo 0 in the graph")
    return parent, children


@dataclass(eq=False)
class SiloGroup:
    """One silo's view of the federation's links: its rank, the world, the tree, the step count."""

    links: SiloLinks
    rank: int
    world: int
    addresses: dict[int, str]
    neighbours: set[int] = field(default_factory=set)
    parent: int = -1
    children: list[int] = field(default_factory=list)
    round: Callable[[], int] = lambda: 0
    step: int = 0
    operations: int = 0  # per silo, as the distributed transport's ``collectives``
    attached: tuple[int, ...] | None = None

    def attach(self, owner: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
        """Learn the neighbours from the graph (half-edges ``src -> dst``) and the placement
        ``owner`` (client -> silo), and dial them; a second call with the same placement does nothing."""
        key = tuple(int(v) for v in owner)
        if self.attached is not None:
            if key != self.attached:
                raise ValueError("the silos' placement changed after the links were made")
            return
        adj = silo_graph(owner, src, dst, self.world)
        parent, children = spanning_tree(adj)
        self.neighbours, self.parent, self.children = adj[self.rank], parent[self.rank], children[self.rank]
        self.links.attach({r: self.addresses[r] for r in self.neighbours})
        self.attached = key

    def next_step(self) -> int:
        self.step += 1
        self.operations += 1
        return self.step

    def header(self, kind: int, data: torch.Tensor, to: int, step: int, edge: int) -> Header:
        return Header(kind, data.dtype, tuple(data.shape), self.round(), step, self.rank, to, edge)

    def send_all(self, frames: dict[int, bytes]) -> None:
        """Send each frame to its neighbour and wait until each has filed it."""
        sent = {r: self.links.send(r, f) for r, f in frames.items()}
        for r, s in sent.items():
            self.links.settle(r, s)

    def expect(self, sender: int, step: int, kind: int, edge: int) -> Frame:
        """The frame of ``step`` from ``sender``, which must be of ``kind`` and ``edge`` and this round."""
        got = self.links.take(sender, step)
        why = got.reason if isinstance(got, Refused) else check(got, kind, self.round(), edge)
        if why is not None:
            raise SiloLinkError(f"silo {self.rank}: refused the frame of silo {sender} at step {step}: {why}")
        assert isinstance(got, Frame)
        return got

    # -- along the tree ---------------------------------------------------------------------------
    def _gather(self, mine: dict[str, torch.Tensor], op: str) -> dict[str, torch.Tensor] | None:
        """Every silo's named tensors on silo 0 (``None`` elsewhere); one step."""
        step = self.next_step()
        parts = dict(mine)
        for child in self.children:
            parts.update(unpack_tensors(self.expect(child, step, UP, _OPS[op]).data))
        if self.parent < 0:
            return parts
        packed = pack_tensors(parts)
        self.send_all({self.parent: encode(self.header(UP, packed, self.parent, step, _OPS[op]), packed)})
        return None

    def _broadcast(self, value: torch.Tensor | None, op: str) -> torch.Tensor:
        """Silo 0's ``value`` on every silo; one step."""
        step = self.next_step()
        if self.parent >= 0:
            value = self.expect(self.parent, step, DOWN, _OPS[op]).data
        assert value is not None
        self.send_all({c: encode(self.header(DOWN, value, c, step, _OPS[op]), value) for c in self.children})
        return value

    def reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        """The sum (``op = "sum"``) or maximum (``"max"``) of ``t`` over every silo (see the module
        docstring), on ``t``'s device."""
        parts = self._gather({str(self.rank): t.detach().to("cpu")}, op)
        total: torch.Tensor | None = None
        if parts is not None:
            if sorted(parts) != sorted(str(r) for r in range(self.world)):
                raise SiloLinkError(f"silo 0: a reduction lacks silos ({sorted(parts)})")
            for r in reversed(range(self.world)):  # (Gloo's order for one number, see the docstring)
                part = parts[str(r)]
                if part.shape != t.shape or part.dtype != t.dtype:
                    raise SiloLinkError(
                        f"silo {r} sent {part.dtype}{list(part.shape)} to a reduction of "
                        f"{t.dtype}{list(t.shape)}"
                    )
                total = (
                    part.clone()
                    if total is None
                    else (total + part if op == "sum" else torch.maximum(total, part))
                )
        return self._broadcast(total, op).to(t.device)

    def gather(self, mine: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """Every silo's named tensors on silo 0 (names must differ between silos); ``None`` elsewhere."""
        return self._gather(mine, "gather")

    def all_gather_json(self, numbers: object) -> list[object]:
        """Every silo's ``numbers`` (JSON-able: numbers, strings, lists, dicts), in rank order."""
        blob = json.dumps(numbers).encode()
        mine = {str(self.rank): torch.frombuffer(bytearray(blob), dtype=torch.uint8)}
        parts = self._gather(mine, "json")
        packed = None if parts is None else pack_tensors(parts)
        everyone = unpack_tensors(self._broadcast(packed, "json"))
        return [json.loads(bytes(everyone[str(r)].numpy())) for r in range(self.world)]


def check(frame: Frame, kind: int, round_: int, edge: int) -> str | None:
    """Why ``frame`` is not what a step expects (``None``: it is)."""
    h = frame.header
    if h.kind != kind:
        return f"a frame of kind {h.kind} where kind {kind} was expected"
    if h.round != round_:
        return f"round {h.round}, this silo is in round {round_}"
    if h.edge != edge:
        return "it carries other edges than this step's"
    return None
