"""Client graphs from NetworkX, seeded, with half-edges ``src -> dst`` and their reverses.

Undirected edge ``e = {i, j}`` (``i < j``) gives half-edges ``2e = (i -> j)`` and ``2e + 1 = (j -> i)``;
``rev[h]`` is the opposite half-edge. Each half-edge carries the map ``P_{src,dst}`` owned by ``src``.
Edges may carry positive weights ``a_ij`` (default 1; a three-column edge list ``i j a_ij``), the
weights of the conventional FMTL objective (paper eq. (9), "Special Cases": dFedU's ``a_ij``, the sheaf with
``P_ij = sqrt(a_ij) I``).

Examples:
    :func:`make_graph` draws a connected graph, the same for the same seed:

    >>> import numpy as np
    >>> from sheaf_fmtl.sheaf.graph import make_graph
    >>> graph = make_graph("erdos-renyi", 10, p=0.4, seed=1)
    >>> again = make_graph("erdos-renyi", 10, p=0.4, seed=1)
    >>> graph.is_connected(), np.array_equal(graph.edges, again.edges)
    (True, True)
    >>> make_graph("star", 4).edges.tolist()  # hub 0
    [[0, 1], [0, 2], [0, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from ..data.base import DatasetError
from ..data.sizes import check_fits
from ..spelling import setting

GRAPH_KINDS = ("erdos-renyi", "watts-strogatz", "barabasi-albert", "complete", "star", "file")


class GraphError(ValueError):
    """A graph could not be built (disconnected after retries, bad parameters, bad edge-list file)."""


@dataclass(frozen=True)
class ClientGraph:
    """An undirected simple graph on clients ``0..num_nodes-1``.

    ``edges``: ``[E, 2]`` with ``i < j``, sorted. ``weights``: ``[E]`` positive finite ``a_ij`` in the
    order of ``edges`` (``None`` given: all 1). ``src``, ``dst``, ``rev``: ``[2E]`` half-edge arrays.

    Examples:
        The path ``0 - 1 - 2``, its edges given in any order and direction:

        >>> from sheaf_fmtl.sheaf.graph import ClientGraph
        >>> graph = ClientGraph(3, [[1, 0], [1, 2]])
        >>> graph.edges.tolist(), graph.num_half_edges
        ([[0, 1], [1, 2]], 4)
        >>> graph.src.tolist(), graph.dst.tolist(), graph.rev.tolist()  # 2e: i -> j, 2e + 1: j -> i
        ([0, 1, 1, 2], [1, 0, 2, 1], [1, 0, 3, 2])
        >>> graph.neighbors(1), graph.degrees().tolist(), graph.is_connected()
        ([0, 2], [1, 2, 1], True)
    """

    num_nodes: int
    edges: np.ndarray
    weights: np.ndarray | None = None
    src: np.ndarray = field(init=False)
    dst: np.ndarray = field(init=False)
    rev: np.ndarray = field(init=False)
    #: How many edges :func:`make_graph` added to join a draw's components (0: none; see there).
    joined_edges: int = field(default=0, compare=False)
    #: Quantities computed once per graph (``lambda_max``, :mod:`.spectrum`; the edge matchings,
    #: :mod:`.links`); not part of equality.
    cache: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        e = np.sort(np.asarray(self.edges, dtype=np.int64).reshape(-1, 2), axis=1)
        w = np.ones(len(e)) if self.weights is None else np.asarray(self.weights, np.float64).reshape(-1)
        if len(w) != len(e):
            raise GraphError(f"{len(w)} edge weights for {len(e)} edges")
        if not np.all(np.isfinite(w) & (w > 0)):
            raise GraphError("edge weights must be positive and finite")
        order = np.lexsort((e[:, 1], e[:, 0]))
        e, w = e[order], w[order]
        if len(e) and (e[:, 0] == e[:, 1]).any():
            raise GraphError("self-loops are not allowed")
        if len(np.unique(e, axis=0)) != len(e):
            raise GraphError("repeated edges are not allowed")
        if len(e) and (e.min() < 0 or e.max() >= self.num_nodes):
            raise GraphError(f"edge endpoints must lie in 0..{self.num_nodes - 1}")
        object.__setattr__(self, "edges", e)
        object.__setattr__(self, "weights", w)
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

    @property
    def weighted(self) -> bool:
        """Whether some edge weight differs from 1."""
        assert self.weights is not None
        return bool(np.any(self.weights != 1.0))

    def half_edge_weights(self) -> np.ndarray:
        """``[2E]``: ``a_ij`` of each half-edge's undirected edge."""
        assert self.weights is not None
        return np.repeat(self.weights, 2)

    def degrees(self) -> np.ndarray:
        """``[N]`` number of neighbours of each client."""
        return np.bincount(self.src, minlength=self.num_nodes)

    def neighbors(self, i: int) -> list[int]:
        """``N_i``, sorted."""
        return sorted(self.dst[self.src == i].tolist())

    def components(self) -> np.ndarray:
        """``[N]`` the connected component of each client (``0..C-1``), in ``O(N + E)``."""
        a = scipy.sparse.csr_array(
            (np.ones(len(self.src)), (self.src, self.dst)), shape=(self.num_nodes, self.num_nodes)
        )
        labels: np.ndarray = scipy.sparse.csgraph.connected_components(a, directed=False)[1]
        return labels

    def is_connected(self) -> bool:
        """Whether every client can reach every other."""
        return self.num_nodes == 1 or int(self.components().max()) == 0

    def to_networkx(self) -> nx.Graph:
        """A NetworkX graph with the weights ``a_ij`` as edge attribute ``weight``."""
        g = nx.Graph()
        g.add_nodes_from(range(self.num_nodes))
        assert self.weights is not None
        weighted = zip(self.edges.tolist(), self.weights.tolist(), strict=True)
        g.add_weighted_edges_from((i, j, a) for (i, j), a in weighted)
        return g

    @classmethod
    def from_networkx(cls, g: nx.Graph) -> ClientGraph:
        """From a NetworkX graph on nodes ``0..N-1``; an edge attribute ``weight`` gives ``a_ij``."""
        nodes = sorted(g.nodes)
        if nodes != list(range(len(nodes))):
            raise GraphError("graph nodes must be 0..N-1")
        edges = np.array(g.edges, dtype=np.int64).reshape(-1, 2)
        weights = np.fromiter((a for _, _, a in g.edges(data="weight", default=1.0)), np.float64)
        return cls(len(nodes), edges, weights)


def half_edge_matrix(values: np.ndarray, edges: np.ndarray, num_nodes: int) -> np.ndarray:
    """``[N, N]`` from one value per half-edge ``[2E]`` (``2e``: ``i -> j``, ``2e + 1``: ``j -> i``
    of ``edges[e] = (i, j)``; row: the half-edge's source), zero off the graph. For plots of small
    graphs; checkpoints keep the ``[2E]`` values. A value already ``[N, N]`` is returned as is."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 2:
        return v
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    out = np.zeros((num_nodes, num_nodes))
    out[e[:, 0], e[:, 1]], out[e[:, 1], e[:, 0]] = v[0::2], v[1::2]
    return out


#: Bytes a NetworkX edge takes (two adjacency entries and their attribute dicts), and a node.
EDGE_BYTES, NODE_BYTES = 600, 400


def expected_edges(kind: str, n: int, p: float, k: int, m: int) -> float:
    """How many edges the graph ``kind`` on ``n`` clients has (expected, for ``erdos-renyi``)."""
    pairs = n * (n - 1) / 2
    return {"erdos-renyi": p * pairs, "complete": pairs, "watts-strogatz": n * k / 2}.get(kind, float(n * m))


#: Clients above which an Erdos-Renyi graph is drawn in ``O(N + E)`` (``fast_gnp_random_graph``;
#: up to it ``gnp_random_graph``, ``O(N^2)``, whose graphs every earlier result used) and drawn
#: once: its small components are joined to the largest by one edge each (:func:`join_components`),
#: since at a fixed mean degree a large draw is almost never connected (``N e^(-degree)`` isolated
#: clients are expected).
LARGE_GRAPH = 1000


def _draw(kind: str, n: int, p: float, k: int, m: int, seed: int) -> nx.Graph:
    if kind == "erdos-renyi":
        sampler = nx.fast_gnp_random_graph if n > LARGE_GRAPH else nx.gnp_random_graph
        return sampler(n, p, seed=seed)
    if kind == "watts-strogatz":
        return nx.watts_strogatz_graph(n, k, p, seed=seed)
    if kind == "barabasi-albert":
        return nx.barabasi_albert_graph(n, m, seed=seed)
    if kind == "complete":
        return nx.complete_graph(n)
    if kind == "star":
        return nx.star_graph(n - 1)  # node 0 is the hub (a server)
    raise GraphError(f"unknown graph kind {kind!r}; allowed: {', '.join(GRAPH_KINDS)}")


def join_components(graph: ClientGraph, seed: int) -> ClientGraph:
    """``graph`` with each component but the largest joined to the largest by one edge, from the
    component's lowest client to a client of the largest drawn with ``seed``; ``joined_edges``
    counts them. ``O(N + E)``."""
    labels = graph.components()
    count = int(labels.max()) + 1
    if count == 1:
        return graph
    largest = int(np.argmax(np.bincount(labels)))
    first = np.unique(labels, return_index=True)[1]  # the lowest client of each component
    others = first[np.arange(count) != largest]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6A01]))
    targets = rng.choice(np.flatnonzero(labels == largest), size=len(others))
    edges = np.concatenate([graph.edges, np.stack([others, targets], 1)])
    weights = np.concatenate([graph.weights, np.ones(len(others))])
    return ClientGraph(graph.num_nodes, edges, weights, joined_edges=len(others))


def _connected_p(num_nodes: int) -> float:
    """A ``graph_p`` twice the connectivity threshold ``ln(N)/N`` (at most 1), rounded up to 2 digits."""
    return min(1.0, float(np.ceil(200 * np.log(num_nodes) / num_nodes) / 100))


def _probability_of_degree(degree: float, num_nodes: int) -> float:
    """``graph_degree / (clients - 1)``; GraphError when no graph on ``num_nodes`` has that mean degree."""
    if not 0 < degree <= num_nodes - 1:
        raise GraphError(
            f"graph_degree = {degree:g} on {num_nodes} clients: a mean degree lies in (0, clients - 1] "
            f"= (0, {num_nodes - 1}]; lower graph_degree "
            f"(e.g. {setting('graph_degree', max(1, num_nodes // 2))}) or raise clients"
        )
    return degree / (num_nodes - 1)


def _check_fits(need: float, what: str) -> None:
    """Sizes first: a graph (and its maps) that cannot be held is refused before it is drawn."""
    try:
        check_fits(need, what, "lower clients, choose a sparser graph, or lower gamma")
    except DatasetError as e:
        raise GraphError(str(e)) from None


def make_graph(
    kind: str,
    num_nodes: int,
    *,
    p: float = 0.2,
    degree: float | None = None,
    k: int = 4,
    m: int = 2,
    seed: int = 0,
    path: str | Path | None = None,
    max_tries: int = 100,
    edge_bytes: float = 0.0,
) -> ClientGraph:
    """A connected client graph; a disconnected random draw is redrawn with a derived seed.

    Erdos-Renyi ``G(n, p)`` (above :data:`LARGE_GRAPH` clients drawn once in ``O(N + E)`` and its
    components joined), Watts-Strogatz ``(k, p)``, Barabasi-Albert ``m``, complete, star
    (hub 0), or an edge-list file (one ``i j`` pair per line, nodes ``0..num_nodes-1``).

    Args:
        kind: one of :data:`GRAPH_KINDS`.
        num_nodes: ``N >= 2``.
        p, k, m: the random graphs' parameters (``graph_p``, ``graph_k``, ``graph_m``).
        degree: ``erdos-renyi``'s mean degree (``graph_degree``): ``p = degree / (num_nodes - 1)``,
            one draw, its small components joined (as above :data:`LARGE_GRAPH` clients).
        seed: the first draw's seed; redraws derive theirs from it.
        path: the edge list when ``kind == "file"``.
        max_tries: draws before :class:`GraphError`.
        edge_bytes: what the run will hold per edge besides the graph (maps, messages): with the
            graph's own bytes, checked against what this process may use before any draw.
    Returns:
        The connected client graph (paper Section 5: Erdos-Renyi, small-world, scale-free, complete).
    """
    if num_nodes < 2:
        raise GraphError(f"a client graph needs at least 2 nodes, got {num_nodes}")
    if kind == "file":
        return read_edge_list(path, num_nodes)
    if kind == "erdos-renyi" and degree is not None:
        p = _probability_of_degree(degree, num_nodes)
    if kind == "watts-strogatz" and not 2 <= k < num_nodes:
        raise GraphError(f"watts-strogatz needs 2 <= k < clients, got k={k} with {num_nodes} clients")
    if kind == "barabasi-albert" and not 1 <= m < num_nodes:
        raise GraphError(f"barabasi-albert needs 1 <= m < clients, got m={m} with {num_nodes} clients")
    need = expected_edges(kind, num_nodes, p, k, m) * (EDGE_BYTES + edge_bytes) + num_nodes * NODE_BYTES
    _check_fits(need, f"the {kind} graph on {num_nodes} clients with its per-edge state")
    if kind == "erdos-renyi" and (num_nodes > LARGE_GRAPH or degree is not None):  # one draw, joined
        return join_components(ClientGraph.from_networkx(_draw(kind, num_nodes, p, k, m, seed)), seed)
    for attempt in range(max_tries):
        derived = seed if attempt == 0 else int(np.random.SeedSequence([seed, attempt]).generate_state(1)[0])
        graph = ClientGraph.from_networkx(_draw(kind, num_nodes, p, k, m, derived))
        if graph.is_connected():
            return graph
    raise GraphError(
        f"{kind} graph with {num_nodes} nodes (p={p}, k={k}, m={m}) was disconnected in all {max_tries} "
        f"draws from seed {seed}; raise graph_p (connectivity needs roughly p > ln(N)/N = "
        f"{np.log(num_nodes) / num_nodes:.3f}: e.g. {setting('graph_p', _connected_p(num_nodes))}), or give "
        f"graph_degree (one draw, its components joined: e.g. {setting('graph_degree', 4)})"
    )


def read_edge_list(path: str | Path | None, num_nodes: int) -> ClientGraph:
    """An edge-list file: ``i j`` or ``i j a_ij`` per line (a positive finite weight; default 1),
    spaces or commas, ``#`` comments allowed; every error names the file and the line.

    Args:
        path: the file (``graph_file``).
        num_nodes: the number of clients; node ids lie in ``0..num_nodes-1``.
    Returns:
        The connected, possibly weighted, client graph.
    """
    if path is None or not Path(path).is_file():
        why = "no such file" if path is None or not Path(path).exists() else "not a file"
        raise GraphError(
            f"graph=file needs graph_file pointing to an edge-list file; got {path!r} ({why}): give "
            f"{setting('graph_file', 'edges.txt')}"
        )
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise GraphError(f"{path}: cannot read the edge list ({e})") from None
    seen: dict[tuple[int, int], int] = {}
    weights: list[float] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        i, j, a = _parse_edge(line, f"{path}:{lineno}", num_nodes)
        key = (min(i, j), max(i, j))
        if key in seen:
            raise GraphError(f"{path}:{lineno}: edge {i} {j} repeats line {seen[key]}")
        seen[key] = lineno
        weights.append(a)
    edges = np.array(list(seen), dtype=np.int64).reshape(-1, 2)
    graph = ClientGraph(num_nodes, edges, np.array(weights))
    if not graph.is_connected():
        raise GraphError(f"{path}: the graph on {num_nodes} clients is not connected")
    return graph


def _parse_edge(line: str, where: str, num_nodes: int) -> tuple[int, int, float]:
    """``(i, j, a_ij)`` of one edge-list line; ``where`` is ``file:line`` for errors."""
    parts = line.replace(",", " ").split()
    if len(parts) not in (2, 3):
        raise GraphError(f"{where}: expected 'i j' or 'i j weight', got {line!r}")
    try:
        i, j = int(parts[0]), int(parts[1])
    except ValueError:
        raise GraphError(f"{where}: expected two integer node ids, got {line!r}") from None
    if not (0 <= i < num_nodes and 0 <= j < num_nodes):
        raise GraphError(f"{where}: node ids must lie in 0..{num_nodes - 1}, got {i} {j}")
    if i == j:
        raise GraphError(f"{where}: self-loop {i} {j} (an edge must join two different clients)")
    try:
        a = float(parts[2]) if len(parts) == 3 else 1.0
    except ValueError:
        raise GraphError(f"{where}: the weight {parts[2]!r} is not a number") from None
    if not (np.isfinite(a) and a > 0):
        raise GraphError(f"{where}: the weight must be positive and finite, got {parts[2]}")
    return i, j, a
