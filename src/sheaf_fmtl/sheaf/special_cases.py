"""Fixed-map sheaves that turn Sheaf-FMTL into known problems (paper Section "Special Cases").

All of them run the ``sheaf-fmtl`` algorithm with ``eta = 0`` (maps never change):

- :func:`conventional_fmtl`: ``P_ij = sqrt(a) I``, ``d_ij = d`` gives the conventional FMTL
  objective ``sum_i f_i + lam/2 sum_{e={i,j}} a ||theta_i - theta_j||^2`` (Dinh et al. 2022; dFedU).
- :func:`personalised_fl`: a server node 0 without data (``f_0 = 0``), a star, identity maps:
  ``sum_i f_i(theta_i) + lam/2 sum_i ||theta_i - theta_0||^2``, the personalised FL objective of
  Hanzely et al. (Eq. 2) with ``theta_0 = theta_bar``. Algorithm 1 is then plain gradient descent
  on it, jointly in ``(theta_bar, theta_1..N)``.
- :func:`hybrid_fl`: a server node 0 with all features, clients with subsets; ``P_0i = Pi_i`` (the
  selection matrix pruning the server model to client ``i``'s), ``P_i0 = I``, ``d_e = d_i``: the
  energy is ``sum_i ||theta_i - Pi_i theta_0||^2`` (Zhang et al. 2022, Eq. 6 with ``mu_1 = 0``).
- local training is ``lam = 0`` (any maps).

Node 0 of the star graphs is the server; it is a node of the federation without test data, so
the recorded mean test metric leaves it out (its ``per_client`` entry is ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..algorithms.sheaf_fmtl import SheafState
from ..config import RunConfig
from ..data.base import ClientSplit, FederatedDataset
from ..federation import Federation, build_federation
from ..runtime.simulate import Simulation, build_simulation
from .graph import ClientGraph, make_graph
from .layout import build_layout
from .maps import MAP_DTYPES

MapOf = Callable[[int, int], torch.Tensor]  # (i, j) -> P_ij [d_ij, d_i]


def conventional_fmtl(config: RunConfig, a: float = 1.0) -> RunConfig:
    """Sheaf-FMTL with fixed ``P_ij = sqrt(a) I`` and ``d_ij = d_i`` (``gamma = 1``): dFedU's
    problem with ``a_ij = a`` on every edge."""
    if a <= 0:
        raise ValueError(f"edge weight a must be > 0, got {a}")
    return config.replace(
        algorithm="sheaf-fmtl", gamma=1.0, eta=0.0, map_init="identity", map_scale=math.sqrt(a)
    )


def with_server_node(dataset: FederatedDataset, server: ClientSplit | None = None) -> FederatedDataset:
    """``dataset`` with node 0 prepended: ``server``, or by default a node without any data
    (``f_0 = 0``; see ``Cohort._loss``) and the feature shape of client 0."""
    if server is None:
        first = dataset.clients[0]
        empty_x = np.zeros((0, *first.x_train.shape[1:]), first.x_train.dtype)
        empty_y = np.zeros(0, first.y_train.dtype)
        server = ClientSplit(empty_x, empty_y, empty_x, empty_y)
    return FederatedDataset(dataset.name, dataset.task, dataset.num_classes, (server, *dataset.clients))


def star(num_nodes: int) -> ClientGraph:
    """Node 0 (the server) joined to every other node, and no other edge."""
    return make_graph("star", num_nodes)


def personalised_fl(config: RunConfig, dataset: FederatedDataset) -> Simulation:
    """Sheaf-FMTL on ``dataset`` plus a data-free server node 0, over a star, with identity maps.

    Iterates (Algorithm 1 with ``P = I``): ``theta_i <- theta_i - alpha (g_i + lam (theta_i -
    theta_0))`` and ``theta_0 <- theta_0 - alpha lam sum_i (theta_0 - theta_i)``: gradient steps on
    Hanzely et al.'s ``sum_i f_i(theta_i) + lam/2 sum_i ||theta_i - theta_bar||^2``.
    """
    fed = build_federation(with_server_node(dataset), config.model, l2=config.l2, device=config.device)
    return build_simulation(conventional_fmtl(config), fed=fed, graph=star(fed.num_clients))


def linear_selection(features: Sequence[int], num_features: int, outputs: int) -> np.ndarray:
    """Row indices of ``Pi_i`` into the server's flat linear/logistic parameters.

    The models are ``nn.Linear``: ``theta = [W (outputs x features, row-major), b (outputs)]``. A
    client seeing server features ``features`` (in its own column order) owns ``W[:, features]``
    and ``b``; ``Pi_i = I_{d_0}[index]``.
    """
    f = np.asarray(features, np.int64)
    if len(f) == 0 or f.min() < 0 or f.max() >= num_features or len(np.unique(f)) != len(f):
        raise ValueError(f"features must be distinct indices into 0..{num_features - 1}, got {f.tolist()}")
    rows = np.arange(outputs)[:, None] * num_features + f[None, :]
    return np.concatenate([rows.reshape(-1), outputs * num_features + np.arange(outputs)])


def set_fixed_maps(sim: Simulation, edge_dims: np.ndarray, map_of: MapOf) -> None:
    """Replace a fresh ``sheaf-fmtl`` simulation's layout and maps by ``P_ij = map_of(i, j)``
    (``[edge_dims[e], d_i]``), stacked per shape bucket. Call before the first round."""
    state = sim.state
    if not isinstance(state, SheafState) or sim.config.eta != 0.0:
        raise ValueError("fixed maps need algorithm=sheaf-fmtl with eta=0")
    fed, graph = sim.ctx.fed, sim.ctx.graph
    dims, cohorts = fed.node_dims().tolist(), fed.cohort_of.tolist()
    layout = build_layout(graph, dims, cohorts, 1.0, edge_dim_override=edge_dims)
    dtype = MAP_DTYPES[sim.config.map_dtype]
    maps = []
    for b in layout.buckets:
        stack = [map_of(int(graph.src[h]), int(graph.dst[h])) for h in b.half_edges.tolist()]
        for p in stack:
            if tuple(p.shape) != (b.edge_dim, b.node_dim):
                raise ValueError(f"map has shape {tuple(p.shape)}, expected {(b.edge_dim, b.node_dim)}")
        maps.append(torch.stack(stack).to(dtype=dtype, device=state.thetas[0].device))
    state.layout, state.maps = layout, maps


def hybrid_fl(config: RunConfig, dataset: FederatedDataset, features: Sequence[Sequence[int]]) -> Simulation:
    """Sheaf-FMTL as hybrid FL: node 0 of ``dataset`` is the server and holds all ``F`` features;
    client ``i >= 1`` holds the server's features ``features[i - 1]`` (its columns, in order).

    Star graph, ``d_e = d_i``, ``P_0i = Pi_i`` (:func:`linear_selection`), ``P_i0 = I_{d_i}``:
    ``theta^T L theta = sum_i ||theta_i - Pi_i theta_0||^2``. Linear or logistic models only.
    """
    fed = build_federation(dataset, config.model, l2=config.l2, device=config.device)
    if len(features) != fed.num_clients - 1:
        raise ValueError(f"need one feature list per client (node 0 is the server): {fed.num_clients - 1}")
    num_features = int(np.prod(dataset.feature_shape(0)))
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    selections = [linear_selection(f, num_features, outputs) for f in features]
    _check_hybrid(fed, selections)
    graph = star(fed.num_clients)
    d0 = int(fed.node_dims()[0])
    eye0 = torch.eye(d0)

    def map_of(i: int, j: int) -> torch.Tensor:
        return eye0[torch.as_tensor(selections[j - 1])] if i == 0 else torch.eye(len(selections[i - 1]))

    sim = build_simulation(conventional_fmtl(config), fed=fed, graph=graph)
    set_fixed_maps(sim, np.array([len(s) for s in selections], np.int64), map_of)
    return sim


def _check_hybrid(fed: Federation, selections: list[np.ndarray]) -> None:
    if any(c.model_name not in ("linear", "logistic") for c in fed.cohorts):
        raise ValueError("hybrid_fl builds selection matrices for linear and logistic models only")
    dims = fed.node_dims()
    for i, sel in enumerate(selections, start=1):
        if len(sel) != dims[i]:
            raise ValueError(f"client {i} has {dims[i]} parameters but its feature list selects {len(sel)}")
