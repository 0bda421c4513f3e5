"""Which process holds which clients: the placement of a federation's clients over ranks.

A rank holds a *shard*: its clients (global ids), their data, models and outgoing half-edges (the
maps ``P_ij`` they own). Every rank computes the same placement from the graph and the config, so
no rank has to be told who holds what.

- ``contiguous`` (default): clients ``0..N-1`` in ``K`` contiguous blocks of near-equal size.
- ``community``: NetworkX Louvain communities (seeded), packed largest first onto the least loaded
  rank, so that most edges stay inside a rank (fewer bytes cross ranks); falls back to contiguous
  blocks when a rank would be left without clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ...config.values import PLACEMENTS
from ...sheaf.graph import ClientGraph


@dataclass(frozen=True, eq=False)
class Shard:
    """Rank ``rank`` of ``world``; ``owner[i]``: the rank holding client ``i``."""

    rank: int
    world: int
    owner: np.ndarray  # [N] int64

    @property
    def clients(self) -> np.ndarray:
        """The global ids held here, ascending."""
        return np.flatnonzero(self.owner == self.rank)

    def cut_edges(self, graph: ClientGraph) -> int:
        """Edges whose two clients sit on different ranks."""
        return int((self.owner[graph.edges[:, 0]] != self.owner[graph.edges[:, 1]]).sum())


def contiguous(num_clients: int, world: int) -> np.ndarray:
    """``[N]`` owner ranks: contiguous blocks, sizes differing by at most one."""
    return np.concatenate(
        [np.full(len(b), r) for r, b in enumerate(np.array_split(np.arange(num_clients), world))]
    )


def community(graph: ClientGraph, world: int, seed: int = 0) -> np.ndarray:
    """``[N]`` owner ranks from Louvain communities (see the module docstring)."""
    parts = nx.community.louvain_communities(graph.to_networkx(), seed=seed)
    owner, load = np.full(graph.num_nodes, -1, np.int64), np.zeros(world, np.int64)
    for part in sorted(parts, key=lambda p: (-len(p), min(p))):
        r = int(np.argmin(load))
        owner[sorted(part)] = r
        load[r] += len(part)
    return owner if (load > 0).all() else contiguous(graph.num_nodes, world)


def placement(graph: ClientGraph, world: int, how: str = "contiguous", seed: int = 0) -> np.ndarray:
    """``[N]`` owner rank of each client (ValueError for more ranks than clients or an unknown ``how``)."""
    if not 1 <= world <= graph.num_nodes:
        raise ValueError(f"processes = {world}: need between 1 and the number of clients ({graph.num_nodes})")
    if how == "contiguous":
        return contiguous(graph.num_nodes, world)
    if how == "community":
        return community(graph, world, seed)
    raise ValueError(f"unknown placement {how!r}; allowed: {', '.join(PLACEMENTS)}")
