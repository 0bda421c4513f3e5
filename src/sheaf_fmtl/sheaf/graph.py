"""Client graphs from NetworkX, seeded, with half-edges ``src -> dst`` and their reverses.

Undirected edge ``e = {i, j}`` (``i < j``) gives half-edges ``2e = (i -> j)`` and ``2e + 1 = (j -> i)``;
``rev[h]`` is the opposite half-edge. Each half-edge carries the map ``P_{src,dst}`` owned by ``src``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

GRAPH_KINDS = ("erdos-renyi", "watts-strogatz", "barabasi-albert", "complete", "star", "file")


class GraphError(ValueError):
    """A graph could not be built (disconnected after retries, bad parameters, bad edge-list file)."""


@dataclass(frozen=True)
class ClientGraph:
    """An undirected simple graph on clients ``0..num_nodes-1``.

    ``edges``: ``[E, 2]`` with ``i < j``, sorted. ``src``, ``dst``, ``rev``: ``[2E]`` half-edge arrays.
    """

    num_nodes: int
    edges: np.ndarray
    src: np.ndarray = field(init=False)
    dst: np.ndarray = field(init=False)
    rev: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        e = np.asarray(self.edges, dtype=np.int64).reshape(-1, 2)
        e = np.sort(e, axis=1)
        e = e[np.lexsort((e[:, 1], e[:, 0]))]
        if len(e) and (e[:, 0] == e[:, 1]).any():
            raise GraphError("self-loops are not allowed")
        if len(np.unique(e, axis=0)) != len(e):
            raise GraphError("repeated edges are not allowed")
        if len(e) and (e.min() < 0 or e.max() >= self.num_nodes):
            raise GraphError(f"edge endpoints must lie in 0..{self.num_nodes - 1}")
        object.__setattr__(self, "edges", e)
        src = np.empty(2 * len(e), dtype=np.int64)
        src[0::2], src[1::2] = e[:, 0], e[:, 1]
        dst = np.empty_like(src)
        dst[0::2], dst[1::2] = e[:, 1], e[:, 0]
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "rev", np.arange(len(src)) ^ 1)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    @property
    def num_half_edges(self) -> int:
        return len(self.src)

    def degrees(self) -> np.ndarray:
        return np.bincount(self.src, minlength=self.num_nodes)

    def neighbors(self, i: int) -> list[int]:
        return sorted(self.dst[self.src == i].tolist())

    def is_connected(self) -> bool:
        return self.num_nodes == 1 or nx.is_connected(self.to_networkx())

    def to_networkx(self) -> nx.Graph:
        g = nx.Graph()
        g.add_nodes_from(range(self.num_nodes))
        g.add_edges_from(map(tuple, self.edges.tolist()))
        return g

    @classmethod
    def from_networkx(cls, g: nx.Graph) -> ClientGraph:
        nodes = sorted(g.nodes)
        if nodes != list(range(len(nodes))):
            raise GraphError("graph nodes must be 0..N-1")
        return cls(len(nodes), np.array(list(g.edges), dtype=np.int64).reshape(-1, 2))


def _draw(kind: str, n: int, p: float, k: int, m: int, seed: int) -> nx.Graph:
    if kind == "erdos-renyi":
        return nx.erdos_renyi_graph(n, p, seed=seed)
    if kind == "watts-strogatz":
        return nx.watts_strogatz_graph(n, k, p, seed=seed)
    if kind == "barabasi-albert":
        return nx.barabasi_albert_graph(n, m, seed=seed)
    if kind == "complete":
        return nx.complete_graph(n)
    if kind == "star":
        return nx.star_graph(n - 1)  # node 0 is the hub (a server)
    raise GraphError(f"unknown graph kind {kind!r}; allowed: {', '.join(GRAPH_KINDS)}")


def make_graph(
    kind: str,
    num_nodes: int,
    *,
    p: float = 0.2,
    k: int = 4,
    m: int = 2,
    seed: int = 0,
    path: str | Path | None = None,
    max_tries: int = 100,
) -> ClientGraph:
    """A connected client graph; a disconnected random draw is redrawn with a derived seed.

    Erdos-Renyi ``G(n, p)``, Watts-Strogatz ``(k, p)``, Barabasi-Albert ``m``, complete, star
    (hub 0), or an edge-list file (one ``i j`` pair per line, nodes ``0..num_nodes-1``).
    """
    if num_nodes < 2:
        raise GraphError(f"a client graph needs at least 2 nodes, got {num_nodes}")
    if kind == "file":
        return read_edge_list(path, num_nodes)
    if kind == "watts-strogatz" and not 2 <= k < num_nodes:
        raise GraphError(f"watts-strogatz needs 2 <= k < clients, got k={k} with {num_nodes} clients")
    if kind == "barabasi-albert" and not 1 <= m < num_nodes:
        raise GraphError(f"barabasi-albert needs 1 <= m < clients, got m={m} with {num_nodes} clients")
    for attempt in range(max_tries):
        derived = seed if attempt == 0 else int(np.random.SeedSequence([seed, attempt]).generate_state(1)[0])
        graph = ClientGraph.from_networkx(_draw(kind, num_nodes, p, k, m, derived))
        if graph.is_connected():
            return graph
    raise GraphError(
        f"{kind} graph with {num_nodes} nodes (p={p}, k={k}, m={m}) was disconnected in all {max_tries} "
        f"draws from seed {seed}; raise graph_p (connectivity needs roughly p > ln(N)/N = "
        f"{np.log(num_nodes) / num_nodes:.3f})"
    )


def read_edge_list(path: str | Path | None, num_nodes: int) -> ClientGraph:
    """An edge-list file: ``i j`` per line, ``#`` comments allowed; must be connected."""
    if path is None or not Path(path).is_file():
        raise GraphError(f"graph=file needs graph_file pointing to an edge-list file; got {path!r}")
    edges = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            i, j = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise GraphError(f"{path}:{lineno}: expected two integer node ids, got {line!r}") from None
        if not (0 <= i < num_nodes and 0 <= j < num_nodes):
            raise GraphError(f"{path}:{lineno}: node ids must lie in 0..{num_nodes - 1}")
        edges.append((min(i, j), max(i, j)))
    graph = ClientGraph(num_nodes, np.array(sorted(set(edges)), dtype=np.int64).reshape(-1, 2))
    if not graph.is_connected():
        raise GraphError(f"{path}: the graph on {num_nodes} clients is not connected")
    return graph
