"""Feature-aware fixed maps for clients that see different subsets of one feature space: hybrid
FL's selection matrices (paper, "Connection with hybrid FL") put on the edges of a client graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..config import RunConfig
from ..data.base import FederatedDataset
from ..federation import build_federation
from ..runtime.engine.simulate import Simulation, build_graph
from ..sheaf.graph import ClientGraph
from .fixed import linear_selection, with_fixed_maps


def shared_feature_maps(
    config: RunConfig,
    dataset: FederatedDataset,
    features: Sequence[Sequence[int] | np.ndarray],
    graph: ClientGraph | None = None,
) -> Simulation[Any]:
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

    The same coupling without stored maps, from any config and across processes, is ``maps =
    features`` (:mod:`sheaf_fmtl.algorithms.maps.coordinates`; the feature ids come from the
    dataset); this dense form stays as its independent check and for hand-made feature lists.
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
    columns = _columns(features, dataset, dims, outputs)
    if graph is None:
        graph = build_graph(config, n)
    if graph.num_nodes != n:
        raise ValueError(f"graph has {graph.num_nodes} nodes but the federation has {n} clients")
    edge_dims = np.array([len(_rows(columns, outputs, int(i), int(j))) for i, j in graph.edges], np.int64)

    def map_of(i: int, j: int) -> torch.Tensor:
        return torch.eye(dims[i])[torch.as_tensor(_rows(columns, outputs, i, j))]

    return with_fixed_maps(config, fed, graph, edge_dims, map_of)


def _columns(
    features: Sequence[Sequence[int] | np.ndarray], dataset: FederatedDataset, dims: list[int], outputs: int
) -> list[dict[int, int]]:
    """Per client: global feature -> its column, checked against the client's input width and its
    number of parameters ``dims[i]`` (a linear model's ``outputs (width + 1)``)."""
    columns: list[dict[int, int]] = []
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
    return columns


def _rows(columns: list[dict[int, int]], outputs: int, i: int, j: int) -> np.ndarray:
    """Rows of ``P_ij``: ``W_i[:, S]`` (``S`` in increasing global index), then ``b_i``."""
    width = len(columns[i])
    shared = sorted(set(columns[i]) & set(columns[j]))
    if not shared:  # nothing in common but the outputs: the biases
        return outputs * width + np.arange(outputs)
    return linear_selection([columns[i][g] for g in shared], width, outputs)
