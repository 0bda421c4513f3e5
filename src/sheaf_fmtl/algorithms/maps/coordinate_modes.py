"""Each coordinate mode's initial state (:mod:`.coordinates`): the models, the layout of the
coordinates its edges couple, and the supports (``redrawn``: whole models; ``features`` and
``aligned``: the coordinates two clients share, fixed)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ...config import ConfigError
from ...sheaf.layout import build_layout
from ...sheaf.selection import Support
from ...sheaf.supports import align_initial_models
from ..protocol.algorithm import Context
from .coordinate_state import CoordinateState, aligned_supports, feature_supports, flat_index


def whole_models(ctx: Context, thetas: list[torch.Tensor]) -> CoordinateState:
    """``maps = redrawn``: every edge couples its whole models (``d_i = d_j``), ``d_e = max(1,
    floor(gamma d))`` coordinates a round, drawn afresh each round."""
    fed, graph, cfg = ctx.fed, ctx.graph, ctx.config
    dims, cohorts = fed.node_dims(), fed.cohort_of.tolist()
    bad = np.flatnonzero(dims[graph.edges[:, 0]] != dims[graph.edges[:, 1]])
    if len(bad):
        i, j = graph.edges[int(bad[0])]
        raise ConfigError(
            f"maps=redrawn couples whole models, but clients {i} and {j} have {dims[i]} and "
            f"{dims[j]} parameters; use maps=features (tabular) or maps=aligned (CNNs)"
        )
    edge_dims = np.maximum(1, np.floor(cfg.gamma * dims[graph.edges[:, 0]])).astype(np.int64)
    layout = build_layout(graph, dims.tolist(), cohorts, cfg.gamma, edge_dim_override=edge_dims)
    return CoordinateState(thetas=thetas, layout=layout, support=Support.whole(dims[graph.src[layout.order]]))


def aligned_start(ctx: Context, thetas: list[torch.Tensor]) -> list[torch.Tensor]:
    """``maps = aligned``: the shared slices start equal, from every architecture's initial model
    (the same in any process)."""
    fed, cfg = ctx.fed, ctx.config
    archs = fed.architectures
    references = [a.initial_model(cfg.seed, cfg.init == "common") for a in archs]
    arch_of = [int(fed.arch_of[c.clients[0]]) for c in fed.cohorts]
    return align_initial_models(
        [a.module for a in archs], references, list(zip(arch_of, thetas, strict=True))
    )


def shared_coordinates(
    supports: Callable[[Context], list[np.ndarray]],
    start: Callable[[Context, list[torch.Tensor]], list[torch.Tensor]] = lambda ctx, thetas: thetas,
) -> Callable[[Context, list[torch.Tensor]], CoordinateState]:
    """``maps = features`` or ``aligned``: each edge couples the coordinates ``supports`` gives
    its half-edges, all of them every round; ``start`` sets the initial models."""

    def build(ctx: Context, thetas: list[torch.Tensor]) -> CoordinateState:
        fed, graph, mode = ctx.fed, ctx.graph, ctx.config.maps
        lists = supports(ctx)
        edge_dims = np.array([len(lists[2 * e]) for e in range(graph.num_edges)], np.int64)
        if (edge_dims == 0).any():
            i, j = graph.edges[int(np.flatnonzero(edge_dims == 0)[0])]
            raise ConfigError(f"maps={mode}: clients {i} and {j} share no parameter to couple")
        dims, cohorts = fed.node_dims(), fed.cohort_of.tolist()
        layout = build_layout(graph, dims.tolist(), cohorts, 1.0, edge_dim_override=edge_dims)
        support = Support.from_lists([lists[h] for h in layout.order.tolist()], thetas[0].device)
        thetas = start(ctx, thetas)
        state = CoordinateState(thetas=thetas, layout=layout, support=support)
        assert support.index is not None
        blocks = layout.bucket_messages(support.index)  # [H_b, d_e] coordinates of each bucket
        state.constant_coords = flat_index(layout, thetas, list(blocks))
        return state

    return build


#: Each mode's initial state: the models, the layout of the coordinates its edges couple, the supports.
COUPLED: dict[str, Callable[[Context, list[torch.Tensor]], CoordinateState]] = {
    "redrawn": whole_models,
    "features": shared_coordinates(feature_supports),
    "aligned": shared_coordinates(aligned_supports, aligned_start),
}
