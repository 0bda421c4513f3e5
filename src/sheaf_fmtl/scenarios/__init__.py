"""The paper's special cases (Section "Special Cases") as ready-made Sheaf-FMTL simulations with
fixed maps (``eta = 0``), above the runtime: :mod:`.fixed` (the mechanism, conventional FMTL /
weighted dFedU), :mod:`.server` (personalised FL, hybrid FL), :mod:`.features` (feature-aware maps).

:func:`build_topology` is what ``sheaf-fmtl run --set topology=NAME`` uses (:data:`TOPOLOGIES`).
Each forces ``algorithm = sheaf-fmtl``, ``eta = 0``, ``gamma = 1`` and identity-based maps; the
saved ``config.yaml`` records that.
"""

from __future__ import annotations

from typing import Any

from ..config import ConfigError, RunConfig
from ..data.synthetic import CLUSTERS_DEFAULTS, clusters_feature_sets
from ..federation import build_federation
from ..runtime.engine.simulate import Simulation, build_graph, build_simulation, load_dataset
from ..spelling import setting
from .features import shared_feature_maps
from .fixed import MapOf, conventional_fmtl, linear_selection, set_fixed_maps, weighted_fmtl, with_fixed_maps
from .server import empty_split, hybrid_fl, personalised_fl, star, with_server_node

TOPOLOGIES = {
    "conventional-fmtl": "P_ij = sqrt(a_ij) I on the config's graph (a_ij: its edge weights, 1 if none), "
    "i.e. weighted dFedU",
    "personalised-fl": "a data-less server node 0 joined to every client by identity maps (Hanzely et al.)",
    "hybrid-fl": "a data-less server node 0 holding all features, selection maps to clients holding "
    "subsets (Zhang et al.); dataset synthetic-clusters",
}


def build_topology(config: RunConfig) -> Simulation[Any]:
    """The simulation of ``config.topology`` (one of :data:`TOPOLOGIES`); run it with
    ``runtime.run.loop.run(sim.config, out, sim=sim)``. Raises :class:`ConfigError` when the config
    does not fit the special case."""
    name = config.topology
    if name not in TOPOLOGIES:
        allowed = ", ".join(["none", *TOPOLOGIES])
        raise ConfigError(f"config key 'topology': {name!r} names no special case; allowed: {allowed}")
    if config.algorithm != "sheaf-fmtl":
        raise ConfigError(
            f"config key 'topology' = {name} runs sheaf-fmtl with fixed maps; algorithm={config.algorithm} "
            f"is not allowed with it (use {setting('topology', 'none')}, or "
            f"{setting('algorithm', 'sheaf-fmtl')})"
        )
    if name == "personalised-fl":
        return personalised_fl(config, load_dataset(config))
    if name == "hybrid-fl":
        return _hybrid_fl(config)
    fed = build_federation(load_dataset(config), config.model, l2=config.l2, device=config.device)
    return weighted_fmtl(config, fed, build_graph(config, fed.num_clients))


def _hybrid_fl(config: RunConfig) -> Simulation[Any]:
    """Hybrid FL on ``synthetic-clusters``: client ``k`` sees a random subset of the ``F`` features
    (known from the seed), a server node 0 without data holds all ``F``."""
    if config.dataset != "synthetic-clusters":
        raise ConfigError(
            "config key 'topology' = hybrid-fl needs dataset=synthetic-clusters (whose clients see known "
            f"subsets of one feature space); got dataset={config.dataset}: add "
            f"{setting('dataset', 'synthetic-clusters')}"
        )
    dataset = load_dataset(config)
    features = clusters_feature_sets(config.data, config.seed, config.clients)
    num_features = int({**CLUSTERS_DEFAULTS, **config.data}["features"])
    first = dataset.clients[0]
    server = empty_split((num_features,), first.x_train.dtype, first.y_train.dtype)
    return hybrid_fl(config, with_server_node(dataset, server), features)


__all__ = [
    "TOPOLOGIES",
    "MapOf",
    "build_topology",
    "conventional_fmtl",
    "empty_split",
    "hybrid_fl",
    "linear_selection",
    "personalised_fl",
    "set_fixed_maps",
    "shared_feature_maps",
    "star",
    "weighted_fmtl",
    "with_fixed_maps",
    "with_server_node",
]


def build(config: RunConfig) -> Simulation[Any]:
    """The simulation ``config`` asks for: :func:`build_topology` when it names a special case
    (``topology``), else :func:`sheaf_fmtl.runtime.engine.simulate.build_simulation`. What ``sheaf-fmtl run``
    and :func:`sheaf_fmtl.run` pass to the runtime as its builder."""
    return build_simulation(config) if config.topology == "none" else build_topology(config)
