"""The user's own objects given to :func:`sheaf_fmtl.run` and :class:`sheaf_fmtl.Federation` (data,
models, loss, metric, graph), turned into config keys: each object held under a placeholder
(:mod:`sheaf_fmtl.plugins`), an importable function named ``module:function``, a graph checked
first, each refusal in one line. The packages' own ``user`` modules read what these keys name
(:mod:`sheaf_fmtl.data.user`, :mod:`sheaf_fmtl.models.user`, :mod:`sheaf_fmtl.federation.user`).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np
import torch

from .data.pooled import is_pooled, pooled_from_objects
from .data.user import from_objects
from .plugins import Held, hold, spec_of
from .sheaf.graph import ClientGraph, GraphError

#: The keywords of :func:`sheaf_fmtl.run` that may carry Python objects.
OBJECT_KEYS = ("data", "dataset", "model", "loss", "metric", "graph", "transform")


def has_objects(keys: Mapping[str, Any]) -> bool:
    """Whether ``keys`` (:func:`sheaf_fmtl.run`'s) carry Python objects rather than config values."""
    data = keys.get("data")
    if data is not None and not isinstance(data, Mapping):
        return True
    return any(k in keys and not isinstance(keys[k], str) for k in OBJECT_KEYS if k != "data")


class UserObjects:
    """The Python objects one :class:`sheaf_fmtl.Federation` was given, held while it lives, and
    ``num_clients``, the number of clients of the data given as objects (``None`` if none)."""

    def __init__(self) -> None:
        self._held: list[Held] = []
        self.num_clients: int | None = None

    def as_keys(self, **given: Any) -> dict[str, Any]:
        """Config keys for ``given``: objects held (their placeholders), importable functions as
        ``module:function``, strings and ``data`` options as they are; ``None`` left out."""
        keys: dict[str, Any] = {}
        data = given.pop("data", None)
        if given.get("dataset") is not None and not isinstance(given["dataset"], str | Mapping):
            if not callable(given["dataset"]):  # the clients' data itself
                data = given.pop("dataset")
        if data is not None and isinstance(data, Mapping):
            keys["data"] = data
        elif is_pooled(data):  # one pooled (x, y): the config's partition splits it over its clients
            pool = pooled_from_objects(data)
            keys["dataset"] = self._hold(pool, f"{len(pool.y)} pooled {pool.task} samples")
        elif data is not None:
            raw = from_objects(data)
            self.num_clients = len(raw.clients)
            keys["dataset"] = self._hold(raw, f"{self.num_clients} {raw.task} clients")
        for key, obj in given.items():
            if obj is None or isinstance(obj, str) or key not in OBJECT_KEYS:
                if obj is not None:
                    keys[key] = obj
            elif key == "graph":
                keys[key] = self._hold_graph(obj)
            else:
                keys[key] = spec_of(obj) or self._hold(obj, _label(obj))
        return keys

    def _hold(self, obj: Any, label: str) -> str:
        held = hold(obj, label)
        self._held.append(held)
        return held.token

    def _hold_graph(self, graph: Any) -> str:
        try:
            if isinstance(graph, nx.Graph):
                g = _networkx(graph)
            elif isinstance(graph, ClientGraph):
                g = graph
            else:
                g = _edge_list(graph, self.num_clients)
        except GraphError as e:  # the graph's own checks (repeated edges, self-loops, ...): name the key
            raise GraphError(str(e) if str(e).startswith("graph") else f"graph: {e}") from None
        if self.num_clients is not None and g.num_nodes != self.num_clients:
            raise GraphError(f"the graph has {g.num_nodes} nodes but the data has {self.num_clients} clients")
        if not g.is_connected():
            raise GraphError(f"the graph on {g.num_nodes} clients is not connected")
        return self._hold(g, f"{g.num_nodes} nodes {g.num_edges} edges")


def _label(obj: Any) -> str:
    if isinstance(obj, Sequence):
        return f"{len(obj)} models"
    return str(getattr(obj, "__name__", None) or type(obj).__name__)


def _node(v: Any, where: str) -> int:
    """A node id: an integer (or an integral number), as the command line's edge-list reader takes."""
    if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real) or not float(v).is_integer():
        raise GraphError(f"graph: {where} has node id {v!r}; node ids must be integers 0..N-1")
    return int(float(v))


def _weight(a: Any, where: str) -> float:
    if isinstance(a, bool | np.bool_) or not isinstance(a, numbers.Real):
        raise GraphError(f"graph: {where} has weight {a!r} ({type(a).__name__}); expected a positive number")
    return float(a)


def _networkx(g: nx.Graph) -> ClientGraph:
    """:meth:`ClientGraph.from_networkx` after the checks that name what is wrong with ``g``."""
    if g.is_directed():
        raise GraphError(
            f"graph: a directed {type(g).__name__}; the coupling is symmetric: give an undirected "
            "networkx.Graph (G.to_undirected() keeps an edge given in either direction)"
        )
    if g.is_multigraph():
        raise GraphError(
            f"graph: a {type(g).__name__} (parallel edges); give a simple networkx.Graph, one edge per pair"
        )
    for v in g.nodes:
        _node(v, f"node {v!r}")
    for i, j, a in g.edges(data="weight", default=1.0):
        _weight(a, f"edge ({i!r}, {j!r})")
    return ClientGraph.from_networkx(g)


def _edge_list(edges: Any, num_clients: int | None) -> ClientGraph:
    """A :class:`ClientGraph` from ``[(i, j), ...]`` or ``[(i, j, weight), ...]``."""
    shape = getattr(edges, "shape", None)
    if shape is not None and len(shape) == 2 and shape[0] == shape[1] > 1:
        a = np.asarray(edges.detach().cpu() if isinstance(edges, torch.Tensor) else edges)
        if np.array_equal(a, a.T) and not np.any(np.diag(a)):
            raise GraphError(
                f"graph: a {shape[0]} x {shape[1]} symmetric array with zero diagonal, an adjacency matrix; "
                "give networkx.from_numpy_array(A) or a list of (i, j[, weight]) edges"
            )
    try:
        rows = [tuple(e) for e in edges]
    except TypeError:
        raise GraphError(
            f"graph: a {type(edges).__name__}; expected a networkx.Graph or a list of (i, j[, weight]) edges"
        ) from None
    if not rows or any(len(r) not in (2, 3) for r in rows):
        raise GraphError("graph: expected a non-empty list of (i, j) or (i, j, weight) edges")
    rows = [tuple(x.item() if isinstance(x, torch.Tensor | np.generic) else x for x in r) for r in rows]
    pairs = np.array([[_node(v, f"edge {k} {r!r}") for v in r[:2]] for k, r in enumerate(rows)], np.int64)
    weights = np.array([_weight(r[2], f"edge {k} {r!r}") if len(r) == 3 else 1.0 for k, r in enumerate(rows)])
    n = num_clients if num_clients is not None else int(pairs.max()) + 1
    return ClientGraph(n, pairs, weights)
