"""``demo.png`` of ``sheaf-fmtl demo``: one row per problem, the test metric against rounds and
against transmitted bits, in the package's figure style."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from ..data.bounded import read_text_bounded
from .labels import long_label
from .records import RunRecord, load_run
from .style import PALETTE, algorithm_color, integer_ticks, metric_label, paper_style, save_figure

DemoCurve = str | Path | tuple[str | Path, str]  # a run folder, or (run folder, legend label)


def plot_demo(
    panels: Sequence[tuple[str, Sequence[DemoCurve]]], out_dir: str | Path, title: str = ""
) -> Path:
    """One row per problem ``(name, curves)``, a curve being a run folder or ``(run folder, label)``:
    the test metric against rounds (left) and against the bits the whole network transmitted
    (right, log scale; runs that send nothing are a dashed line at their final value). Legends name
    the run (its label, or the algorithm and its maps) and the problem; each curve's final value is
    in its legend entry. Returns the PNG."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, curves in panels:
        pairs = [(Path(c[0]), c[1]) if isinstance(c, tuple) else (Path(c), None) for c in curves]
        rows.append((name, pairs))
    with paper_style():
        fig, axes = plt.subplots(
            len(rows), 2, figsize=(13, 4.6 * len(rows) + 0.8), squeeze=False, sharey="row"
        )
        for (name, runs), (ax_r, ax_b) in zip(rows, axes, strict=True):
            _plot_problem(name, runs, ax_r, ax_b)
        if title:
            lines = [w for line in title.splitlines() for w in textwrap.wrap(line, 130)]
            fig.suptitle("\n".join(lines), fontsize=10)
        fig.tight_layout()
        return save_figure(fig, out / "demo", ("png",), dpi=110)[0]


def _plot_problem(name: str, runs: Sequence[tuple[Path, str | None]], ax_r: Axes, ax_b: Axes) -> None:
    """Problem ``name``'s row: its runs' test metric against rounds on ``ax_r``, against the bits
    transmitted on ``ax_b``, with titles naming the problem and its model sizes."""
    records = [load_run(r) for r, _ in runs]
    ylabel = metric_label(records[0].metric, records[0].split)
    summary = json.loads(read_text_bounded(runs[0][0] / "summary.json"))
    dims = summary.get("model_dims", [])
    sizes = f"model sizes d_i = {', '.join(map(str, dims))}" if dims else ""
    used: set[str] = set()
    for record, (_, given) in zip(records, runs, strict=True):
        _plot_run(record, given, ax_r, ax_b, used)
    ax_r.set(
        xlabel="communication round",
        ylabel=ylabel,
        title=f"{name} problem ({sizes}): {ylabel} vs rounds",
    )
    integer_ticks(ax_r)
    ax_b.yaxis.set_tick_params(labelleft=True)
    ax_b.set(
        xlabel="bits transmitted by the whole network (log scale)",
        ylabel=ylabel,
        title=f"{name} problem: {ylabel} vs transmitted bits",
    )
    ax_b.set_xscale("log")
    for ax in (ax_r, ax_b):
        ax.legend(loc="lower right", title=f"{name} problem (final {ylabel})", title_fontsize=8)


def _plot_run(record: RunRecord, given: str | None, ax_r: Axes, ax_b: Axes, used: set[str]) -> None:
    """One run's curves, labelled ``given`` (else by its algorithm and maps) with its final value, in
    its algorithm's color unless ``used`` (a color of the row) has it; a run that sends nothing is a
    dashed line at its final value on ``ax_b``."""
    algorithm = record.config["algorithm"]
    finite = np.isfinite(record.values)
    label = (given or long_label(record.config)) + f": {record.values[finite][-1]:.3f}"
    color = algorithm_color(algorithm)
    if color is None or color in used:
        color = next(c for c in PALETTE if c not in used)
    used.add(color)
    style = "--" if algorithm == "local" else "-"
    ax_r.plot(record.rounds, record.values, style, marker=".", ms=4, color=color, label=label)
    sent = (record.bits > 0) & finite
    if sent.any():
        ax_b.plot(record.bits[sent], record.values[sent], marker=".", ms=4, color=color, label=label)
    else:
        ax_b.axhline(record.values[finite][-1], ls="--", color=color, label=f"{label} (sends nothing)")
