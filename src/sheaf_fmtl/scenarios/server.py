"""Special cases with a server node 0 on a star (paper, "Special Cases"), as fixed-map Sheaf-FMTL:

- :func:`personalised_fl`: a server node without data (``f_0 = 0``), identity maps:
  ``sum_i f_i(theta_i) + lam/2 sum_i ||theta_i - theta_0||^2``, the personalised FL objective of
  Hanzely et al. (Eq. 2) with ``theta_0 = theta_bar``. Algorithm 1 is then plain gradient descent
  on it, jointly in ``(theta_bar, theta_1..N)``.
- :func:`hybrid_fl`: a server node with all features, clients with subsets; ``P_0i = Pi_i`` (the
  selection matrix pruning the server model to client ``i``'s), ``P_i0 = I``, ``d_e = d_i``: the
  energy is ``sum_i ||theta_i - Pi_i theta_0||^2`` (paper eq. (16) ``regularizer_2_of_zang``; Zhang et
  al. 2022, Eq. 6 with ``mu_1 = 0``).

Node 0 is a node of the federation; a server without test data is left out of the recorded mean
test metric (its ``per_client`` entry is ``None``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..config import RunConfig
from ..data.base import ClientSplit, FederatedDataset
from ..federation import Cohorts, build_federation
from ..runtime.engine.simulate import Simulation
from ..sheaf.graph import ClientGraph, make_graph
from .fixed import conventional_fmtl, linear_selection, weighted_fmtl, with_fixed_maps


def with_server_node(dataset: FederatedDataset, server: ClientSplit | None = None) -> FederatedDataset:
    """``dataset`` with node 0 prepended: ``server``, or by default a node without any data
    (``f_0 = 0``; see ``Cohort._loss``) and the feature shape of client 0."""
    if server is None:
        first = dataset.clients[0]
        server = empty_split(first.x_train.shape[1:], first.x_train.dtype, first.y_train.dtype)
    stats = None if dataset.standardization is None else (None, *dataset.standardization)
    return dataclasses.replace(  # loss and metric kept
        dataset, clients=(server, *dataset.clients), standardization=stats
    )


def empty_split(feature_shape: tuple[int, ...], x_dtype: np.dtype, y_dtype: np.dtype) -> ClientSplit:
    """A node without training or test samples, with inputs of ``feature_shape``."""
    empty_x = np.zeros((0, *feature_shape), x_dtype)
    empty_y = np.zeros(0, y_dtype)
    return ClientSplit(empty_x, empty_y, empty_x, empty_y)


def star(num_nodes: int) -> ClientGraph:
    """Node 0 (the server) joined to every other node, and no other edge."""
    return make_graph("star", num_nodes)


def personalised_fl(config: RunConfig, dataset: FederatedDataset) -> Simulation[Any]:
    """Sheaf-FMTL on ``dataset`` plus a data-free server node 0, over a star, with identity maps.

    Iterates (Algorithm 1 with ``P = I``): ``theta_i <- theta_i - alpha (g_i + lam (theta_i -
    theta_0))`` and ``theta_0 <- theta_0 - alpha lam sum_i (theta_0 - theta_i)``: gradient steps on
    Hanzely et al.'s ``sum_i f_i(theta_i) + lam/2 sum_i ||theta_i - theta_bar||^2``.
    """
    fed = build_federation(with_server_node(dataset), config.model, l2=config.l2, device=config.device)
    return weighted_fmtl(config, fed, star(fed.num_clients))


def hybrid_fl(
    config: RunConfig, dataset: FederatedDataset, features: Sequence[Sequence[int] | np.ndarray]
) -> Simulation[Any]:
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
    d0 = int(fed.node_dims()[0])
    eye0 = torch.eye(d0)

    def map_of(i: int, j: int) -> torch.Tensor:
        return eye0[torch.as_tensor(selections[j - 1])] if i == 0 else torch.eye(len(selections[i - 1]))

    edge_dims = np.array([len(s) for s in selections], np.int64)
    return with_fixed_maps(conventional_fmtl(config), fed, star(fed.num_clients), edge_dims, map_of)


def _check_hybrid(fed: Cohorts, selections: list[np.ndarray]) -> None:
    if any(c.model_name not in ("linear", "logistic") for c in fed.cohorts):
        raise ValueError("hybrid_fl builds selection matrices for linear and logistic models only")
    dims = fed.node_dims()
    for i, sel in enumerate(selections, start=1):
        if len(sel) != dims[i]:
            raise ValueError(f"client {i} has {dims[i]} parameters but its feature list selects {len(sel)}")
