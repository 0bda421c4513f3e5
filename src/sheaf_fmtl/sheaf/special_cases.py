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
- :func:`shared_feature_maps`: clients seeing different subsets of one feature space, linked by a
  client graph; ``P_ij`` selects the weights of the features ``i`` and ``j`` both see (and the
  bias), so the energy is ``sum_{e={i,j}} ||W_i[:, S_ij] - W_j[:, S_ij]||^2 + ||b_i - b_j||^2``: hybrid
  FL's selection matrices put on client-client edges.
- local training is ``lam = 0`` (any maps).

Node 0 of the star graphs is the server; it is a node of the federation without test data, so
the recorded mean test metric leaves it out (its ``per_client`` entry is ``None``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..algorithms.sheaf_fmtl import SheafFMTL, SheafState
from ..config import RunConfig
from ..data.base import ClientSplit, FederatedDataset
from ..federation import Federation, build_federation
from ..runtime.simulate import Simulation, build_graph, build_simulation
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
    (``[edge_dims[e], d_i]``), stacked per shape bucket, and rerun the start-up stability check on
    them (per ``sim.config``). Call before the first round."""
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
    assert isinstance(sim.algorithm, SheafFMTL)
    sim.algorithm.check_stability(state, sim.config)


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


def shared_feature_maps(
    config: RunConfig,
    dataset: FederatedDataset,
    features: Sequence[Sequence[int] | np.ndarray],
    graph: ClientGraph | None = None,
) -> Simulation:
    """Sheaf-FMTL with fixed, feature-aware restriction maps for clients that see different subsets
    of one feature space: client ``i``'s columns are the global features ``features[i]``, in order.

    This generalises the paper's hybrid-FL special case (Zhang et al. 2022; :func:`hybrid_fl`), whose
    selection matrices ``Pi_i`` prune a server model holding every feature to client ``i``'s features,
    from server-client edges to the edges of a client graph without a server: for an edge
    ``{i, j}`` with shared features ``S = F_i & F_j`` (in increasing global index), ``P_ij`` selects
    ``W_i[:, S]`` (row-major, output by output) and ``b_i`` from ``theta_i = [W_i, b_i]``, and ``P_ji``
    the same entries of ``theta_j``; ``d_ij = outputs (|S| + 1)``. Then

        ``theta^T L_F theta = sum_{e={i,j}} ||W_i[:, S] - W_j[:, S]||^2 + ||b_i - b_j||^2``,

    the conventional FMTL (dFedU) penalty restricted to the coordinates that mean the same thing in
    both models. An edge whose clients share no feature couples the biases only. Linear or logistic
    models only; the maps stay fixed, so ``config.eta`` must be 0 (one ``d_ij`` vector per neighbour
    and round is sent). ``graph`` defaults to the config's. The start-up stability check
    (``alpha lam lambda_max(L_F) < 2``, refused otherwise) runs on these maps; with selection maps
    ``lambda_max(L_F)`` is at most the graph Laplacian's.
    """
    if config.eta != 0.0:
        raise ValueError(f"shared_feature_maps builds fixed maps: eta must be 0, got eta={config.eta:g}")
    fed = build_federation(dataset, config.model, l2=config.l2, device=config.device)
    n = fed.num_clients
    if len(features) != n:
        raise ValueError(f"need one feature list per client: {n} clients, {len(features)} lists")
    if any(c.model_name not in ("linear", "logistic") for c in fed.cohorts):
        raise ValueError("shared_feature_maps builds selection matrices for linear and logistic models only")
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    dims = fed.node_dims().tolist()
    columns: list[dict[int, int]] = []  # per client: global feature -> its column
    for i, f in enumerate(features):
        cols = [int(v) for v in f]
        width = int(np.prod(dataset.feature_shape(i)))
        if len(set(cols)) != len(cols) or min(cols, default=0) < 0:
            raise ValueError(f"client {i}: features must be distinct indices >= 0, got {cols}")
        if len(cols) != width or dims[i] != outputs * (width + 1):
            raise ValueError(
                f"client {i} has {width} input features ({dims[i]} parameters) but its feature list "
                f"names {len(cols)}"
            )
        columns.append({g: c for c, g in enumerate(cols)})
    if graph is None:
        graph = build_graph(config, n)
    if graph.num_nodes != n:
        raise ValueError(f"graph has {graph.num_nodes} nodes but the federation has {n} clients")

    def rows(i: int, j: int) -> np.ndarray:
        """Rows of ``P_ij``: ``W_i[:, S]`` (``S`` in increasing global index), then ``b_i``."""
        width = len(columns[i])
        shared = sorted(set(columns[i]) & set(columns[j]))
        if not shared:  # nothing in common but the outputs: the biases
            return outputs * width + np.arange(outputs)
        return linear_selection([columns[i][g] for g in shared], width, outputs)

    edge_dims = np.array([len(rows(int(i), int(j))) for i, j in graph.edges], np.int64)

    def map_of(i: int, j: int) -> torch.Tensor:
        return torch.eye(dims[i])[torch.as_tensor(rows(i, j))]

    # the random maps drawn at build are replaced: check stability on the feature maps only
    unchecked = config.replace(algorithm="sheaf-fmtl", stability_check=False)
    sim = build_simulation(unchecked, fed=fed, graph=graph)
    sim.config = config.replace(algorithm="sheaf-fmtl")
    set_fixed_maps(sim, edge_dims, map_of)
    return sim
