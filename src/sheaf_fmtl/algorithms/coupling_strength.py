"""One meaning for ``lam``: the default coupling strength of the coordinate modes, derived from the
problem, and the mean-square stability limit of their coupling step.

A round of a coordinate mode couples, on each edge ``e``, a random fraction ``q = d_e/m_e`` of the
support (``redrawn``: of the whole model; ``proxy``: of the proxy, ``proxy_gamma``; ``features`` and
``aligned``: all of it, ``q = 1``). Its coupling step is ``x <- (I - a L_t) x`` with ``a = alpha lam``
and ``L_t = sum_e a_e (e_i - e_j)(e_i - e_j)^T (x) S_e^T S_e`` this round's sheaf Laplacian
(eq. (18) ``thetaupdate`` without the gradient). With ``E[S^T S] = q I`` and ``E[(S^T S)^2] = m2 I``:

    ``E[L_t] = q L``,   ``E[L_t^2] <= 2 a_max (m2 - q^2) L + q^2 L^2``

(``L`` the graph Laplacian with weights ``a_e <= a_max``; the cross terms of two edges are
independent draws, ``L_e^2 = 2 a_e L_e``). So ``E||x'||^2 < E||x||^2`` along an eigenvector of ``L``
with eigenvalue ``mu`` iff ``2 a q mu > a^2 (2 a_max (m2 - q^2) mu + q^2 mu^2)``, that is

    ``a lambda_S < 2``,   ``lambda_S = 2 a_max (m2/q - q) + q lambda_max(L)``

(selections and orthonormal rows: ``m2 = q``, so ``lambda_S = 2 a_max (1 - q) + q lambda_max``;
gaussian rows: ``m2 = q (1 + q + 1/m)``). ``lambda_S`` runs from one edge's 2 at small ``q`` to the
graph's ``lambda_max`` at ``q = 1``: the mean-square largest eigenvalue of a round's Laplacian.

In expectation a round is dFedU's coupling step with strength ``lam q``, its *pull*. The default
keeps the pull of the mode (:attr:`~sheaf_fmtl.config.registry.MapModeSpec.pull`) at every
compression, and never steps past exact averaging of the coordinates drawn:

    ``lam = min(pull / q, 1 / (alpha lambda_S))``

(``pull = inf``: the averaging step itself, as ProxyFL averages its proxies). At ``gamma = 0.3`` on
the demo's graph this is the earlier fixed default; at ``gamma = 0.01`` on R-MNIST's it is 9.4
where the fixed default gave 0.3.

dFedU couples whole models (``q = 1``): its default is the same rule at the ``features`` mode's pull,
``lam = min(0.1, 1 / (alpha lambda_max(L)))`` (:func:`dfedu_strength`), so that a comparison of the
defaults is like for like: both couplings pull a client as hard toward its neighbours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import RunConfig
from ..config.registry import map_mode_spec
from ..sheaf.graph import ClientGraph
from ..sheaf.spectrum import graph_lambda_max


@dataclass(frozen=True)
class Coupled:
    """The coupled fraction of a coordinate mode: ``q`` (largest over the edges, for the bound),
    ``q_min`` (smallest, for the pull), ``m2_over_q`` (``E[(S^T S)^2] / q``) and the support size."""

    q: float
    q_min: float
    m2_over_q: float
    support: int


def coupled_fraction(config: RunConfig, node_dims: np.ndarray, graph: ClientGraph) -> Coupled:
    """``q = d_e/m_e`` of the mode ``config.maps`` on ``graph`` (``node_dims``: each client's ``d``)."""
    if config.maps == "proxy":  # one architecture: the proxy's d is in node_dims' place
        m = np.asarray(node_dims[:1], dtype=np.int64)
        gamma, kind = config.proxy_gamma, "selection"
    elif config.maps == "redrawn":
        m = np.asarray(node_dims[graph.edges[:, 0]], dtype=np.int64) if graph.num_edges else node_dims[:1]
        gamma, kind = config.gamma, config.map_kind
    else:  # features, aligned: the whole support every round
        return Coupled(1.0, 1.0, 1.0, 1)
    q = np.maximum(1, np.floor(gamma * m)) / m
    top = float(q.max())
    support = int(m[int(np.argmax(q))])
    m2 = 1.0 + top + 1.0 / support if kind == "gaussian" else 1.0
    return Coupled(top, float(q.min()), m2, support)


def mean_square_lambda(coupled: Coupled, lambda_max: float, a_max: float = 1.0) -> float:
    """``lambda_S = 2 a_max (m2/q - q) + q lambda_max``: the step ``alpha lam`` is mean-square stable
    iff ``alpha lam lambda_S < 2`` (module docstring)."""
    q = coupled.q
    return 2.0 * a_max * (coupled.m2_over_q - q) + q * lambda_max


def default_strength(
    config: RunConfig, node_dims: np.ndarray, graph: ClientGraph
) -> tuple[float, str] | None:
    """``(lam, why)`` of the rule ``lam = min(pull / q, 1 / (alpha lambda_S))`` for a mode with a
    :attr:`~sheaf_fmtl.config.registry.MapModeSpec.pull`, else ``None``."""
    spec = map_mode_spec(config.maps)
    if spec is None or spec.pull is None or config.estimates and config.maps == "redrawn":
        return None
    coupled = coupled_fraction(config, node_dims, graph)
    lmax = graph_lambda_max(graph)
    a_max = float(np.max(graph.half_edge_weights())) if graph.weighted and graph.num_edges else 1.0
    lam_s = mean_square_lambda(coupled, lmax, a_max)
    cap = math.inf if lam_s <= 0 else 1.0 / (config.alpha * lam_s)
    wanted = spec.pull / coupled.q_min
    lam = float(f"{min(wanted, cap):.4g}")  # four digits, as config.yaml shows it
    if not math.isfinite(lam):  # no edge: nothing to couple
        lam = 0.0
    pull = "exact averaging" if math.isinf(spec.pull) else f"pull {spec.pull:g}/q = {wanted:.4g}"
    why = (
        f"lam = min(pull/q, 1/(alpha lambda_S)) = {lam:.4g} ({pull}; q = {coupled.q_min:.4g}, "
        f"lambda_S = {lam_s:.4g} from lambda_max(L) = {lmax:.4g}, alpha = {config.alpha:g})"
    )
    return lam, why


#: dFedU's pull: that of the mode that couples whole models with the same strength (``features``).
DFEDU_PULL = 0.1


def dfedu_strength(config: RunConfig, graph: ClientGraph) -> tuple[float, str]:
    """``(lam, why)`` of dFedU's default, the rule of :func:`default_strength` at ``q = 1``:
    ``lam = min(pull, 1 / (alpha lambda_max(L)))`` with ``L`` the (weighted) graph Laplacian."""
    lmax = graph_lambda_max(graph)
    a_max = float(np.max(graph.half_edge_weights())) if graph.weighted and graph.num_edges else 1.0
    lam_s = mean_square_lambda(Coupled(1.0, 1.0, 1.0, 1), lmax, a_max)
    cap = math.inf if lam_s <= 0 else 1.0 / (config.alpha * lam_s)
    lam = float(f"{min(DFEDU_PULL, cap):.4g}")
    why = (
        f"lam = min(pull, 1/(alpha lambda_max)) = {lam:.4g} (dFedU's pull {DFEDU_PULL:g}, as the feature "
        f"maps'; q = 1, lambda_max(L) = {lmax:.4g}, alpha = {config.alpha:g})"
    )
    return lam, why
