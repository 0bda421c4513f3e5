"""Bits to target for the frontier's report (:mod:`.frontier_report`): the cumulative bits a run had
sent when its test curve first reached a problem's target, the target being dFedU whole's final
metric (mean over its seeds) less half an accuracy point (accuracy is a fraction: less 0.005), or,
for an MSE (lower is better), times 1.005.

A run is evaluated every ``eval_every`` rounds (and at its last), so its bits to target are those
at the first evaluation at or past the target: up to ``eval_every`` rounds' bits more than the
round that crossed it. A seed whose curve never reaches the target counts as not reached; a
point's bits to target are the mean over the seeds that reached it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..metrics.results import METRIC, read_metrics

#: Half an accuracy point, on accuracy as the summaries hold it (a fraction).
ACCURACY_MARGIN = 0.005
#: An MSE target: the reference's final MSE times this.
MSE_FACTOR = 1.005

#: One run's curve: the cumulative bits sent and the evaluated metric, per evaluation.
Curve = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class ToTarget:
    """A point's bits to target: the mean over the seeds that reached it (NaN when none did),
    how many reached it, of how many seeds with a curve."""

    bits: float
    reached: int
    seeds: int

    @property
    def shown(self) -> str:
        """``reached/seeds``, e.g. ``2/3``."""
        return f"{self.reached}/{self.seeds}"


def target(reference_final: float, higher: bool) -> float:
    """The target from the reference's final metric (mean over seeds): half an accuracy point
    below it when higher is better, 0.5 % above it when lower is better (MSE)."""
    return reference_final - ACCURACY_MARGIN if higher else reference_final * MSE_FACTOR


def read_curve(run_dir: Path) -> Curve | None:
    """A run folder's ``metrics.csv`` as (cumulative ``transmitted_bits``, evaluated metric) per
    evaluation; ``None`` when the folder has no such file or it lacks either column."""
    try:
        columns = read_metrics(run_dir)
    except (OSError, ValueError):
        return None
    if METRIC not in columns or "transmitted_bits" not in columns:
        return None
    return np.asarray(columns["transmitted_bits"], dtype=float), np.asarray(columns[METRIC], dtype=float)


def bits_to_target(curve: Curve, goal: float, higher: bool) -> float:
    """The bits sent by the first evaluation whose metric is at or past ``goal`` (at least it when
    higher is better, at most it when lower is); NaN when no evaluation reaches it."""
    bits, values = curve
    hit = values >= goal if higher else values <= goal  # NaN (not evaluated) never reaches
    first = np.flatnonzero(hit)
    return float(bits[first[0]]) if len(first) else math.nan


def to_target(curves: Sequence[Curve], goal: float, higher: bool) -> ToTarget:
    """A point's bits to target over its seeds' curves (``goal`` NaN: none reached)."""
    per_seed = np.array([bits_to_target(c, goal, higher) for c in curves], dtype=float)
    hit = per_seed[np.isfinite(per_seed)]
    return ToTarget(float(hit.mean()) if len(hit) else math.nan, len(hit), len(curves))


def fewer_bits(reference: ToTarget, other: ToTarget) -> float:
    """How many times fewer bits ``other`` needed to the target than ``reference``: the ratio of
    their bits to target (1 where they are equal, infinite where ``other`` sent none; NaN where
    either never reached it)."""
    if not (math.isfinite(reference.bits) and math.isfinite(other.bits)):
        return math.nan
    if reference.bits == other.bits:
        return 1.0
    return reference.bits / other.bits if other.bits > 0 else math.inf
