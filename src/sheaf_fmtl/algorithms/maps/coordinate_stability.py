"""Start-up checks of :mod:`.sheaf_coordinates` (maps that relate coordinates): the coupling
step's stability, and with ``estimates`` the consensus step against the copies' refresh rate."""

from __future__ import annotations

import numpy as np

from ...config import ConfigError
from ..protocol.algorithm import Context
from ..training.coupling import require_stable_coupling
from ..training.coupling_step import reference_step
from ..training.coupling_strength import (
    coupled_fraction,
    mean_square_lambda,
    refresh_limit,
    scheduled_lambda_max,
)
from .coordinate_state import CoordinateState


def check_coordinate_coupling(state: CoordinateState, ctx: Context, kind: str, estimates: bool) -> str | None:
    """Refuse a coupling step that is not mean-square stable, ``alpha lam lambda_S >= 2``.

    Maps redrawn each round (``redrawn``, the proxies' coupling): ``lambda_S = 2 a_max (m2/q - q) + q
    lambda_max(L)``, the mean-square largest eigenvalue of a round's sheaf Laplacian
    (:func:`~.coupling_strength.mean_square_lambda`; a coordinate drawn by several edges in one round
    can exceed it in that round, and the next rounds' draws take it back). Fixed supports
    (``features``, ``aligned``) and the estimates' copies: the graph Laplacian's ``lambda_max``, which
    bounds every round's. Sets ``state.lambda_max``; returns a note for the user, or ``None``."""
    cfg = ctx.config
    assert cfg.lam is not None
    lmax, operator = coupling_bound(state, ctx, kind, estimates)
    state.lambda_max = lmax
    note = require_stable_coupling(reference_step(cfg), cfg.lam, lmax, operator, maps=False)
    if estimates:
        check_refresh_rate(state, ctx, scheduled_lambda_max(ctx.config, ctx.graph))
    return note


def coupling_bound(state: CoordinateState, ctx: Context, kind: str, estimates: bool) -> tuple[float, str]:
    """``(lambda_S, its name)``: the bound of :func:`check_coordinate_coupling` on every round's
    sheaf Laplacian (maps drawn afresh each round: the mean-square bound; else the graph
    Laplacian's ``lambda_max``)."""
    cfg, graph, layout = ctx.config, ctx.graph, state.layout
    assert layout is not None
    lmax = scheduled_lambda_max(cfg, graph)
    if state.constant_coords is None and not estimates:  # maps drawn afresh each round
        coupled = coupled_fraction(cfg.replace(maps="redrawn", map_kind=kind), layout.node_dims, graph)
        a_max = float(np.max(graph.half_edge_weights())) if graph.weighted else 1.0
        lmax = mean_square_lambda(coupled, lmax, a_max)
        return lmax, f"mean-square bound over the maps drawn each round, q = {coupled.q:.3g}"
    return lmax, "graph Laplacian bound"


def largest_pull(state: CoordinateState, ctx: Context, kind: str, estimates: bool) -> float:
    """The largest pull per round ``c lam`` a measured coupling step may take (:mod:`.coupling_step`):
    ``1 / lambda_S``, exact averaging along the top eigenvector (the ``lam`` rule's cap); with
    estimates the rule's consensus step, ``p / ((2 - p) lambda_max(L))`` (half its limit)."""
    if estimates:
        p, top = refresh_rate(state, ctx), scheduled_lambda_max(ctx.config, ctx.graph)
        return 0.5 * refresh_limit(p) / top if top > 0 else float("inf")
    if state.lambda_max is None:  # (the start-up check did not run: summary.json reports it from here)
        state.lambda_max = coupling_bound(state, ctx, kind, False)[0]
    return 1.0 / state.lambda_max if state.lambda_max > 0 else float("inf")


def check_refresh_rate(state: CoordinateState, ctx: Context, lambda_max: float) -> None:
    """With estimates, refuse ``alpha lam lambda_max(L) > 2p / (2 - p)`` (:func:`refresh_limit`),
    ``p = min d_e/d`` the smallest refresh rate of an edge's copies: a copy's residual
    ``xhat_(i|e) - xhat_(j|e)`` is re-applied every round until its next refresh, so a larger
    consensus step overshoots and the neighbours drift apart."""
    cfg = ctx.config
    assert cfg.lam is not None
    p = refresh_rate(state, ctx)
    alpha = reference_step(cfg)
    step, limit = alpha * cfg.lam * lambda_max, refresh_limit(p)
    if step > limit:
        raise ConfigError(
            f"unstable configuration: maps=redrawn with estimates refreshes each coordinate of an "
            f"edge's copies about once in {1 / p:.3g} rounds (d_e/d = {p:.3g}), and "
            f"alpha*lam*lambda_max = {alpha:g}*{cfg.lam:g}*{lambda_max:.4g} = {step:.3g} > 2p/(2-p) = "
            f"{limit:.3g}, so the neighbours drift apart; use lam <= {limit / (alpha * lambda_max):.3g} "
            "(lam=null takes half of it), or raise gamma; stability_check=false skips this check"
        )


def refresh_rate(state: CoordinateState, ctx: Context) -> float:
    """``p = min_e d_e / d``: the smallest rate at which a coordinate of an edge's copies is refreshed."""
    layout = state.layout
    assert layout is not None
    return float((layout.edge_dims / layout.node_dims[ctx.graph.edges[:, 0]]).min())
