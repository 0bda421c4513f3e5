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

from ...config import RunConfig
from ...config.registry import map_mode_spec
from ...sheaf.graph import ClientGraph
from ...sheaf.links import BUDGETED, link_fraction, round_lambda_max
from .coupling_step import measured, reference_step


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
    lmax, links = scheduled_lambda_max(config, graph), scheduled_fraction(config, graph)
    a_max = float(np.max(graph.half_edge_weights())) if graph.weighted and graph.num_edges else 1.0
    lam_s = mean_square_lambda(coupled, lmax, a_max)
    cap = _cap(config, lam_s)
    wanted = spec.pull / (coupled.q_min * links)
    lam = float(f"{min(wanted, cap):.4g}")  # four digits, as config.yaml shows it
    if not math.isfinite(lam):  # no edge: nothing to couple
        lam = 0.0
    per = "q" if links == 1.0 else "(q b)"
    pull = "exact averaging" if math.isinf(spec.pull) else f"pull {spec.pull:g}/{per} = {wanted:.4g}"
    why = (
        f"lam = min(pull/{per}, 1/({_step_name(config)} lambda_S)) = {lam:.4g} ({pull}; q = "
        f"{coupled.q_min:.4g}{_links_note(links)}, lambda_S = {lam_s:.4g} from {_lmax_name(config)} = "
        f"{lmax:.4g}, {_step_value(config)})"
    )
    return lam, why


def scheduled_lambda_max(config: RunConfig, graph: ClientGraph) -> float:
    """``lambda_max`` bounding every round's Laplacian: the graph's, or under budgeted links the
    round's bound (:func:`~sheaf_fmtl.sheaf.links.round_lambda_max`)."""
    return round_lambda_max(config.graph_schedule, config.link_budget, graph)


def scheduled_fraction(config: RunConfig, graph: ClientGraph) -> float:
    """``b``, the expected share of the edges on in a round (budgeted links; else 1): the rules'
    pull is divided by it, so a round pulls on average as a round of the whole graph."""
    return link_fraction(config.graph_schedule, config.link_budget, graph)


def _links_note(links: float) -> str:
    return "" if links == 1.0 else f", b = {links:.3g} of the edges a round"


def _lmax_name(config: RunConfig) -> str:
    budgeted = config.graph_schedule in BUDGETED
    return "lambda_max(L_t) <= min(lambda_max(L), 2 k)" if budgeted else "lambda_max(L)"


def _cap(config: RunConfig, lam_s: float) -> float:
    """``1 / (c lambda_S)`` with the coupling step's start-up value ``c``; none (inf) where ``c`` is
    measured each round (:mod:`.coupling_step`: the run caps ``c lam lambda_S <= 1`` instead)."""
    if lam_s <= 0 or measured(config):
        return math.inf
    return 1.0 / (reference_step(config) * lam_s)


def _step_name(config: RunConfig) -> str:
    return "alpha" if config.coupling_step is None and not measured(config) else "c"


def _step_value(config: RunConfig) -> str:
    if measured(config):
        return "c measured each round and capped at c lam lambda_S <= 1"
    if config.coupling_step is not None:
        return f"c = coupling_step = {config.coupling_step:g}"
    return f"alpha = {config.alpha:g}"


#: dFedU's pull: that of the mode that couples whole models with the same strength (``features``).
DFEDU_PULL = 0.1


def dfedu_strength(config: RunConfig, graph: ClientGraph) -> tuple[float, str]:
    """``(lam, why)`` of dFedU's default, the rule of :func:`default_strength` at ``q = 1``:
    ``lam = min(pull, 1 / (alpha lambda_max(L)))`` with ``L`` the (weighted) graph Laplacian."""
    lmax, links = scheduled_lambda_max(config, graph), scheduled_fraction(config, graph)
    a_max = float(np.max(graph.half_edge_weights())) if graph.weighted and graph.num_edges else 1.0
    lam_s = mean_square_lambda(Coupled(1.0, 1.0, 1.0, 1), lmax, a_max)
    lam = float(f"{min(DFEDU_PULL / links, _cap(config, lam_s)):.4g}")
    pull = "pull" if links == 1.0 else "pull/b"
    why = (
        f"lam = min({pull}, 1/({_step_name(config)} lambda_max)) = {lam:.4g} (dFedU's pull "
        f"{DFEDU_PULL:g}, as the feature maps'; q = 1{_links_note(links)}, {_lmax_name(config)} = "
        f"{lmax:.4g}, {_step_value(config)})"
    )
    return lam, why


#: A user-set pull per round below this fraction of the rule's (1/20) is warned of (:func:`negligible_note`).
NEGLIGIBLE = 0.05


def negligible_note(config: RunConfig, node_dims: np.ndarray, graph: ClientGraph) -> str | None:
    """A one-line warning when a user-set ``lam`` (or ``coupling_step``) pulls each model by less than
    :data:`NEGLIGIBLE` of what the rule's would, a round (``None`` otherwise, and where no rule
    applies: the paper's learned maps, the server baselines). Under a measured coupling step both
    pulls take the same ``c``, so ``lam`` alone is compared."""
    if config.lam is None or config.lam <= 0 or not graph.num_edges:
        return None
    rule = config.replace(lam=None, coupling_step=None)
    if config.algorithm == "dfedu":
        derived: tuple[float, str] | None = dfedu_strength(rule, graph)
    elif config.algorithm == "sheaf-fmtl":
        derived = default_strength(rule, node_dims, graph)
    else:
        return None
    if derived is None or derived[0] <= 0:
        return None
    if config.coupling_step is not None and measured(rule):
        return None  # (the rule's step is measured as the run goes: no like-for-like number at start)
    step, rule_step = reference_step(config), reference_step(rule)
    pull, wanted = step * config.lam, rule_step * derived[0]
    if pull >= NEGLIGIBLE * wanted:
        return None
    key = "lam" if config.coupling_step is None else "lam and coupling_step"
    verb = "pulls" if config.coupling_step is None else "pull"
    pulls = "" if measured(rule) else f" ({pull:.3g} against {wanted:.3g})"
    return (
        f"{key} {verb} each model {wanted / pull:.0f} times less a round than the default rule's{pulls}: "
        f"the coupling is negligible and the run will end near local training; leave {key} out for the "
        f"rule (lam = {derived[0]:.4g}), or raise lam"
    )


def refresh_limit(p: float) -> float:
    """The largest ``alpha lam lambda_max`` of the estimates' consensus step when each coordinate
    of an edge's copies is refreshed with probability ``p`` a round: ``2p / (2 - p)``.

    On one edge without gradients the copies' difference ``D`` is refreshed to the models'
    difference ``delta`` after a gap of ``g ~ Geometric(p)`` rounds, during which ``delta`` moves by
    ``-2 a D`` a round (``a = alpha lam``): ``delta' = (1 - 2 a g) delta``, which shrinks in mean
    square iff ``a < E[g] / E[g^2] = p / (2 - p)``. The edge's Laplacian has eigenvalue 2; for a
    graph, ``lambda_max`` of its Laplacian takes that place."""
    return 2.0 * p / (2.0 - p)
