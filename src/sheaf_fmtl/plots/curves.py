"""The evaluated metric against rounds and against transmitted bits: one row of panels per metric
and split (MSE and accuracy, test and validation scores never share an axis), one curve per
configuration, seeds as mean +- standard error."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter

from ..metrics.groups import RunGroup, group_by_config
from .labels import describe, legend_keys, object_name, title
from .limits import mark_clipped, value_limits
from .records import RunRecord
from .style import color, integer_ticks, marker, metric_label, place_legend


@dataclass(frozen=True)
class Curve:
    """A group of runs on the rounds all of them evaluated.

    Attributes:
        rounds: the common evaluated rounds.
        mean, stderr: mean evaluated metric and its standard error ``s / sqrt(n)`` (``s`` with
            ``n - 1`` degrees of freedom; zeros for one run).
        bits: mean bits transmitted by the whole network up to each round.
        n: number of runs.
    """

    rounds: np.ndarray
    mean: np.ndarray
    stderr: np.ndarray
    bits: np.ndarray
    n: int


def aggregate(records: Sequence[RunRecord]) -> Curve:
    """Mean and standard error over ``records`` (e.g. seeds) at the rounds all of them recorded."""
    if not records:
        raise ValueError("no runs to aggregate")
    common = records[0].rounds[np.isfinite(records[0].rounds)]
    for r in records[1:]:
        common = np.intersect1d(common, r.rounds)
    common = np.unique(common)
    if not len(common):
        names = ", ".join(str(r.path) for r in records)
        raise ValueError(f"nothing to plot: {names} have no evaluated round in common")

    def at(r: RunRecord, column: np.ndarray) -> np.ndarray:
        index = {round_: i for i, round_ in enumerate(r.rounds.tolist())}
        return column[[index[k] for k in common.tolist()]]

    values = np.stack([at(r, r.values) for r in records])
    n = len(records)
    stderr = values.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(len(common))
    bits = np.stack([at(r, r.bits) for r in records]).mean(axis=0)
    return Curve(common, values.mean(axis=0), stderr, bits, n)


def group_label(group: RunGroup, keys: Sequence[str]) -> str:
    """What sets this group apart from the others plotted (``keys``), and its seeds."""
    label = describe(group.config, [k for k in keys if k != "seed"])
    seeds = group.varied.get("seed", [])
    if len(group.runs) > 1:
        return f"{label}, mean ± s.e. of {len(group.runs)} seeds"
    if "seed" in keys and seeds:
        return f"{label}, seed={seeds[0]}"
    return label


def _draw(ax_r: Axes, ax_b: Axes, curve: Curve, label: str, i: int, dashed: bool) -> None:
    style: dict[str, Any] = {
        "color": color(i),
        "marker": marker(i),
        "ms": 4,
        "ls": "--" if dashed else "-",
        "markevery": max(1, len(curve.rounds) // 12),
    }
    ax_r.plot(curve.rounds, curve.mean, label=label, **style)
    if curve.n > 1:
        ax_r.fill_between(
            curve.rounds,
            curve.mean - curve.stderr,
            curve.mean + curve.stderr,
            color=color(i),
            alpha=0.2,
            lw=0,
        )
    sent = (curve.bits > 0) & np.isfinite(curve.mean)
    if sent.any():
        ax_b.plot(curve.bits[sent], curve.mean[sent], label=label, **style)
        if curve.n > 1:
            lo, hi = (curve.mean - curve.stderr)[sent], (curve.mean + curve.stderr)[sent]
            ax_b.fill_between(curve.bits[sent], lo, hi, color=color(i), alpha=0.2, lw=0)
        return
    finite = np.flatnonzero(np.isfinite(curve.mean))
    if not len(finite):
        return
    last = finite[-1]
    ax_b.axhline(curve.mean[last], ls="--", color=color(i), label=f"{label} (sends nothing)")
    if curve.n > 1:
        ax_b.axhspan(
            curve.mean[last] - curve.stderr[last],
            curve.mean[last] + curve.stderr[last],
            color=color(i),
            alpha=0.15,
            lw=0,
        )


def _bits_ticks(ax: Axes) -> None:
    """Labels on the log bits axis that never overlap: a few round values within one decade, 1, 2 and
    5 times the powers of ten over less than two, the powers alone beyond; the minor ticks unlabelled
    (matplotlib labels them over a short range, and ``3x10^4`` ran into ``4x10^4``)."""
    lo, hi = ax.get_xlim()
    decades = np.log10(hi / lo) if lo > 0 else np.inf
    if decades < 1:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    else:
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades < 2 else (1.0,)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _fit_values(ax_r: Axes, ax_b: Axes, curves: Sequence[tuple[Curve, str]]) -> None:
    """Both panels of a row share the value axis of :func:`.limits.value_limits` (bands included);
    a first round left off it is marked on the rounds panel's edge."""
    firsts = [(float(c.rounds[0]), float(c.mean[0]), colour) for c, colour in curves]
    rest = [v for c, _ in curves for v in (*c.mean[1:], *(c.mean - c.stderr)[1:], *(c.mean + c.stderr)[1:])]
    limits = value_limits([v for _, v, _ in firsts], rest)
    if limits is None:
        return
    for ax in (ax_r, ax_b):
        ax.set_ylim(*limits)
    mark_clipped(ax_r, firsts)


def metric_figure(records: Sequence[RunRecord]) -> Figure:
    """One row per metric and split (test ``accuracy``, validation ``mse``, ...): the metric vs
    communication rounds (left) and vs bits transmitted by the whole network (right, log scale; a
    run that sends nothing is a dashed line at its final value). Titles name the datasets; legends name the
    algorithm and the config keys that differ between the runs of the row; runs differing only
    in ``seed`` are one curve, their mean with a standard-error band."""
    by_path = {r.path: r for r in records}
    groups = group_by_config([r.path for r in records], configs=[r.config for r in records])
    metrics = list(dict.fromkeys((r.split, r.metric) for r in records))  # a row each: never a shared axis
    keys = {m: legend_keys([r.config for r in records if (r.split, r.metric) == m]) for m in metrics}
    fig, axes = plt.subplots(len(metrics), 2, figsize=(14, 4.2 * len(metrics)), squeeze=False)
    datasets: dict[tuple[str, str], list[str]] = {m: [] for m in metrics}
    drawn: dict[tuple[str, str], list[tuple[Curve, str]]] = {m: [] for m in metrics}
    for i, group in enumerate(groups):
        members = [by_path[p] for p in group.runs]
        measured = (members[0].split, members[0].metric)
        row = metrics.index(measured)
        datasets[measured] += [r.dataset for r in members]
        dashed = members[0].config.get("algorithm") == "local"
        label = group_label(group, keys[measured])
        curve = aggregate(members)
        _draw(axes[row][0], axes[row][1], curve, label, i, dashed)
        drawn[measured].append((curve, color(i)))
    for measured, (ax_r, ax_b) in zip(metrics, axes, strict=True):
        _fit_values(ax_r, ax_b, drawn[measured])
    for (split, metric), (ax_r, ax_b) in zip(metrics, axes, strict=True):
        ylabel = metric_label(metric, split)
        names = ", ".join(dict.fromkeys(object_name(d) for d in datasets[(split, metric)]))
        ax_r.set(xlabel="communication round", ylabel=ylabel, title=title(f"{names}: {ylabel} vs rounds"))
        ax_b.set(
            xlabel="bits transmitted by the whole network",
            ylabel=ylabel,
            title=title(f"{names}: {ylabel} vs transmitted bits"),
        )
        ax_b.set_xscale("log")
        _bits_ticks(ax_b)
        integer_ticks(ax_r)
        place_legend(ax_b)  # one legend per row: both panels draw the same curves
    fig.tight_layout()
    return fig
