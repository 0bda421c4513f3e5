"""Fixed restriction maps set by hand (``eta = 0``), the mechanism behind every special case of the
paper's Section "Special Cases", and the first of them: conventional FMTL (dFedU's problem).

With ``P_ij = sqrt(a_ij) I`` and ``d_ij = d`` the sheaf energy is ``sum_{e={i,j}} a_ij ||theta_i -
theta_j||^2`` (paper, "Connection with conventional FMTL", eq. (9)), so
Algorithm 1 is dFedU (Dinh et al. 2022) with weights ``a_ij`` (those of a weighted graph, e.g. a
three-column ``graph_file``). On a weighted graph Sheaf-FMTL scales each edge's terms by ``a_ij``
(its maps act as ``sqrt(a_ij) P_ij``), so ``P_ij = I`` on the weighted graph is this case, and maps
set by hand (:func:`set_fixed_maps`) are scaled the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..algorithms.maps.learned import SheafFMTL
from ..algorithms.maps.learned_state import SheafState
from ..config import RunConfig
from ..federation import Cohorts
from ..runtime.engine.simulate import Simulation, build_simulation
from ..sheaf.graph import ClientGraph
from ..sheaf.layout import build_layout
from ..sheaf.maps import MAP_DTYPES
from ..sheaf.supports import linear_columns

MapOf = Callable[[int, int], torch.Tensor]  # (i, j) -> P_ij [d_ij, d_i]


def conventional_fmtl(config: RunConfig, a: float = 1.0) -> RunConfig:
    """Sheaf-FMTL with fixed ``P_ij = sqrt(a) I`` and ``d_ij = d_i`` (``gamma = 1``): dFedU's
    problem with ``a_ij = a`` on every edge."""
    if a <= 0:
        raise ValueError(f"edge weight a must be > 0, got {a}")
    return config.replace(
        algorithm="sheaf-fmtl", gamma=1.0, eta=0.0, map_init="identity", map_scale=math.sqrt(a)
    )


def linear_selection(features: Sequence[int] | np.ndarray, num_features: int, outputs: int) -> np.ndarray:
    """Row indices of ``Pi_i`` into the server's flat linear/logistic parameters.

    The models are ``nn.Linear``: ``theta = [W (outputs x features, row-major), b (outputs)]``. A
    client seeing server features ``features`` (in its own column order) owns ``W[:, features]``
    and ``b``; ``Pi_i = I_{d_0}[index]``.
    """
    f = np.asarray(features, np.int64)
    if len(f) == 0 or f.min() < 0 or f.max() >= num_features or len(np.unique(f)) != len(f):
        raise ValueError(f"features must be distinct indices into 0..{num_features - 1}, got {f.tolist()}")
    return linear_columns(f, num_features, outputs)


def set_fixed_maps(sim: Simulation[Any], edge_dims: np.ndarray, map_of: MapOf) -> None:
    """Replace a fresh ``sheaf-fmtl`` simulation's layout and maps by ``P_ij = map_of(i, j)``
    (``[edge_dims[e], d_i]``), stacked per shape bucket, and rerun the start-up stability check on
    them (per ``sim.config``). On a weighted graph the run scales edge ``{i, j}``'s terms by
    ``a_ij`` on top (``sqrt(a_ij) P_ij``). Call before the first round."""
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


def with_fixed_maps(
    config: RunConfig, fed: Cohorts, graph: ClientGraph, edge_dims: np.ndarray, map_of: MapOf
) -> Simulation[Any]:
    """A ``sheaf-fmtl`` simulation of ``config`` (``eta`` must be 0) on ``fed`` and ``graph`` whose
    maps are ``map_of`` (:func:`set_fixed_maps`); the stability check runs on these maps only (not
    on the maps drawn at build, which are replaced)."""
    config = config.replace(algorithm="sheaf-fmtl", maps="learned" if config.maps == "auto" else config.maps)
    sim = build_simulation(config.replace(stability_check=False), fed=fed, graph=graph)
    sim.config = sim.config.replace(stability_check=config.stability_check)
    set_fixed_maps(sim, edge_dims, map_of)
    return sim


def weighted_fmtl(config: RunConfig, fed: Cohorts, graph: ClientGraph) -> Simulation[Any]:
    """Sheaf-FMTL with fixed ``P_ij = I_d``, ``d_ij = d``, on ``graph`` whose weights ``a_ij`` (1
    where unweighted) scale each edge's terms (maps acting as ``sqrt(a_ij) I_d``): the conventional
    FMTL objective ``sum_i f_i + lam/2 sum_{e={i,j}} a_ij ||theta_i - theta_j||^2`` (paper eq. (9),
    ``conventional FMTL objective``), whose iterates are weighted dFedU's. Every client needs the
    same model size."""
    dims = fed.node_dims()
    if len(set(dims.tolist())) != 1:
        raise ValueError(
            f"identity-based maps compare whole models: every node needs the same model size, this "
            f"federation has parameter counts {sorted(set(dims.tolist()))}"
        )
    d = int(dims[0])
    eye = torch.eye(d)

    def map_of(i: int, j: int) -> torch.Tensor:
        return eye

    edge_dims = np.full(graph.num_edges, d, np.int64)
    return with_fixed_maps(conventional_fmtl(config), fed, graph, edge_dims, map_of)
