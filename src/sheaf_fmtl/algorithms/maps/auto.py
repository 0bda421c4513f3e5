"""``maps = auto`` (the default of ``algorithm = sheaf-fmtl``): the coupling that collaborates for the
clients at hand, chosen at start-up from their models, and ``lam = null`` resolved to the default of
the coupling that runs. The run records what ran (``config.yaml``; ``summary.json``'s ``maps``,
``lam`` and ``maps_auto``).

- neighbouring models of the same size: ``redrawn`` (maps redrawn each round from a shared seed;
  dFedU's accuracy at ``gamma`` times its bits where the models are related);
- the built-in linear/logistic models of clients that see different features (the dataset names
  each client's feature columns): ``features``;
- networks (and the user's own models) of different sizes on one input shape: ``proxy`` (each client
  also trains a proxy of one common built-in architecture, and only the proxies are coupled);
  where no proxy can run (several input shapes, no built-in model to take as the proxy):
  ``aligned`` (the parameter slices the architectures share);
- otherwise (tabular models of different sizes without feature ids): the paper's ``learned`` maps.

``edge_weights = auto`` takes the mode's (``relatedness``; ``graph`` for ``proxy``), recorded in
``summary.json`` (the config keeps ``auto``, so runs group and resume as given).
``lam = null`` takes the mode's rule (:mod:`.coupling_strength`: the same pull at every
compression, capped by exact averaging); the run records how (``summary.json``'s ``lam_rule``).
"""

from __future__ import annotations

import numpy as np
from torch import nn

from ...config import ConfigError, RunConfig
from ...config.defaults import default_lam
from ...config.registry import algorithm_spec
from ...federation import Cohorts
from ...sheaf.graph import ClientGraph
from ..training.coupling_strength import default_strength, dfedu_strength, scheduled_lambda_max
from .proxy import proxy_dim


def _tabular(module: nn.Module) -> bool:
    """One linear layer and nothing else that holds parameters (``linear``, ``logistic``)."""
    held = [m for m in module.modules() if any(True for _ in m.parameters(recurse=False))]
    return len(held) == 1 and isinstance(held[0], nn.Linear)


def choose_maps(fed: Cohorts, graph: ClientGraph, config: RunConfig | None = None) -> tuple[str, str]:
    """``(mode, why)`` for ``maps = auto`` (module docstring); the same in every process (it reads
    every client's model size and architecture, held here or not). Without ``config`` no proxy is
    considered."""
    dims = fed.node_dims()
    if graph.num_edges == 0 or bool(np.all(dims[graph.edges[:, 0]] == dims[graph.edges[:, 1]])):
        return "redrawn", "neighbouring models have the same size"
    tabular = [a.factory is None and _tabular(a.module) for a in fed.architectures]  # built-in ones
    if all(tabular) and fed.dataset.features is not None:
        return "features", "linear/logistic clients see different features"
    if not any(tabular):
        if config is not None and proxy_dim(config, fed) is not None:
            return "proxy", "networks of different sizes on one input shape train proxies of one architecture"
        return "aligned", "networks of different sizes share parameter slices"
    return "learned", NOTHING_TO_RELATE


#: Why ``maps = auto`` fell back to the paper's learned maps; the run warns (:func:`fallback_note`).
NOTHING_TO_RELATE = "models of different sizes with no feature ids to relate"


def fallback_note(why: str | None) -> str | None:
    """The warning of a run whose ``maps = auto`` found nothing to relate, else ``None``."""
    if why != NOTHING_TO_RELATE:
        return None
    return (
        "maps=auto runs the paper's learned maps: the clients' linear models have different sizes and "
        "the data carry no feature ids, and learned maps on such data end near local training; give "
        "each client's column ids (features_i in a file: npz, a client mapping's 'features' in Python "
        "data=) for the feature maps, or set maps explicitly"
    )


def coupled_dims(config: RunConfig, fed: Cohorts) -> np.ndarray:
    """Each client's ``d`` as the coupling sees it: the model's, or the proxy's (``maps = proxy``)."""
    dims = fed.node_dims()
    if config.algorithm == "sheaf-fmtl" and config.maps == "proxy":
        dims = np.full(len(dims), proxy_dim(config, fed) or 1, np.int64)
    return dims


def resolve_coupling(
    config: RunConfig, fed: Cohorts, graph: ClientGraph
) -> tuple[RunConfig, str | None, str | None]:
    """``config`` as it runs: ``maps = auto`` replaced by the chosen mode (``sheaf-fmtl``) and
    ``lam = null`` by the default of the coupling that runs (algorithms that do not read ``lam``
    keep it null); with the reason for the choice and how ``lam`` was derived (``None``: not
    resolved here)."""
    why = rule = None
    if config.algorithm == "sheaf-fmtl" and config.maps == "auto":
        mode, why = choose_maps(fed, graph, config)
        try:
            config = config.replace(maps=mode)
        except ConfigError as e:
            raise ConfigError(f"maps=auto chose maps={mode} ({why}), but {e}") from None
    if config.lam is None and "lam" in getattr(
        algorithm_spec(config.algorithm), "reads", ()
    ):  # (others leave lam unread, null)
        derived = None
        if config.algorithm == "sheaf-fmtl":
            derived = default_strength(config, coupled_dims(config, fed), graph)
        elif config.algorithm == "dfedu":  # the same rule at q = 1: like for like with the coordinate maps
            derived = dfedu_strength(config, graph)
        if derived is not None:
            lam, rule = derived
            config = config.replace(lam=lam)
        else:
            lmax = refresh = None
            if config.algorithm == "sheaf-fmtl" and config.estimates and graph.num_edges:
                lmax = scheduled_lambda_max(config, graph)
                dims = fed.node_dims()[graph.edges[:, 0]]
                refresh = float((np.maximum(1, np.floor(config.gamma * dims)) / dims).min())
            config = config.replace(lam=default_lam(config, lmax, refresh))
            if lmax is not None:  # (a fixed default, the mode's or the algorithm's, needs no reason)
                limit = "p / ((2 - p) alpha lambda_max)"
                rule = f"half the estimates' consensus-step limit, {limit} = {config.lam:.4g}"
    return config, why, rule
