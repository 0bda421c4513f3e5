"""Defaults that depend on the problem: ``lam`` of a config that leaves it open, once the map mode
(and, with estimates, the graph) is known."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import registry

if TYPE_CHECKING:
    from .schema import RunConfig

#: ``lam`` when the config leaves it open (``null``) and the algorithm is not ``sheaf-fmtl`` (each map mode
#: has its own: :attr:`.registry.MapModeSpec.default_lam`, or the rule of its ``pull``,
#: ``algorithms/training/coupling_strength.py``); ``redrawn`` with ``estimates`` half its stability limit
#: (:func:`default_lam`; ``algorithms/maps/coordinate_stability.py``).
LAM_DEFAULT = 0.01


def default_lam(config: RunConfig, lambda_max: float | None = None, refresh: float | None = None) -> float:
    """``lam`` of a config that leaves it open, once ``maps`` is known: see the key's doc (each
    mode's :attr:`.registry.MapModeSpec.default_lam`). With estimates: half the consensus step's
    limit ``alpha lam lambda_max <= 2p / (2 - p)`` (``p``: ``refresh``, the smallest ``d_e/d``, else
    ``gamma``; ``lambda_max`` of the graph Laplacian, else 2)."""
    if config.algorithm != "sheaf-fmtl":
        return LAM_DEFAULT
    spec = registry.map_mode_spec(config.maps)
    if spec is not None and "estimates" in spec.reads and config.estimates:
        p = refresh if refresh is not None else config.gamma
        top = lambda_max if lambda_max is not None and lambda_max > 0 else 2.0
        step = config.coupling_step if config.coupling_step is not None else config.alpha
        return p / (2.0 - p) / (step * top)
    return spec.default_lam if spec is not None else LAM_DEFAULT
