"""The frontier's table (``frontier.csv``, ``frontier.md``) and figure (``frontier.png``/``.pdf``),
from the points of :mod:`.frontier` (read from their recorded summaries, and their seeds' curves
for the bits to target of :mod:`.frontier_target`)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

from ..config.files import replace_file
from ..plots.style import color, marker, paper_style, plt, save_figure
from .frontier_target import ToTarget, fewer_bits, read_curve, target, to_target

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .frontier_points import Point

COLUMNS = (
    "problem",
    "method",
    "level",
    "strength",
    "metric",
    "mean",
    "se",
    "seeds",
    "total_bits",
    "bits_per_round",
    "bits_per_round_analytic",
    "seconds",
    "pareto",
    "target",
    "bits_to_target",
    "reached",
    "fewer_bits_than_dfedu",
)
#: The method whose final metric sets each problem's target, and whose bits to target the others'
#: are compared with.
REFERENCE = "dfedu"


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    if not len(values):
        return float("nan"), float("nan")
    se = float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(values.mean()), se


def row(point: Point) -> dict[str, Any]:
    """One point's numbers: the test metric over seeds, its bits and time (means over seeds)."""
    mean, se = _mean_se(point.values("final"))
    first = next((s for s in point.summaries if s.get("final") is not None), {})
    shown = {
        k: "rule" if v is None else f"{v:.4g}" if isinstance(v, float) else v
        for k, v in point.strength.items()
    }
    strength = ", ".join(f"{k}={v}" for k, v in shown.items()) or "-"
    if first.get("lam") is not None and point.strength.get("lam", 0) is None:
        strength += f" (ran lam={first['lam']:.4g})"
    if first.get("consensus_step") is not None:
        strength += f", gamma={first['consensus_step']:.3g}"
    return {
        "problem": point.problem,
        "method": point.method.label,
        "level": _level(point),
        "strength": strength,
        "metric": first.get("metric", ""),
        "mean": mean,
        "se": se,
        "seeds": len(point.values("final")),
        "total_bits": _mean_se(point.values("transmitted_bits"))[0],
        "bits_per_round": first.get("bits_per_round", _per_round(first)),
        "bits_per_round_analytic": first.get("bits_per_round_analytic", ""),
        "seconds": _mean_se(point.values("wall_seconds"))[0],
        "higher": first.get("higher_is_better", True),
    }


def _per_round(summary: dict[str, Any]) -> float:
    """Measured bits a round of a run whose algorithm has no formula (``transmitted_bits / rounds``)."""
    rounds = summary.get("rounds") or 0
    return summary.get("transmitted_bits", 0) / rounds if rounds else float("nan")


def add_bits_to_target(points: Sequence[Point], rows: Sequence[dict[str, Any]]) -> None:
    """Each row's ``target`` (from its problem's dFedU whole point; NaN without one), its
    ``bits_to_target`` over the seeds that reached it, how many ``reached`` it (``2/3``) and
    ``fewer_bits_than_dfedu`` (dFedU's bits to target over the row's), in place."""
    goals = {
        p.problem: target(r["mean"], r["higher"])
        for p, r in zip(points, rows, strict=True)
        if p.method.slug == REFERENCE
    }
    results = []
    for p, r in zip(points, rows, strict=True):
        curves = [c for c in (read_curve(d) for d in p.run_dirs()) if c is not None]
        results.append(to_target(curves, goals.get(p.problem, math.nan), r["higher"]))
    reference = {p.problem: t for p, t in zip(points, results, strict=True) if p.method.slug == REFERENCE}
    for p, r, t in zip(points, rows, results, strict=True):
        r["target"] = goals.get(p.problem, math.nan)
        r["bits_to_target"] = t.bits
        r["reached"] = t.shown
        r["fewer_bits_than_dfedu"] = fewer_bits(reference.get(p.problem, ToTarget(math.nan, 0, 0)), t)


def pareto(rows: Sequence[dict[str, Any]]) -> list[bool]:
    """Whether each row is on its problem's front: no other row sends at most its bits with a
    metric at least as good, one of the two strictly (rows that send nothing are left out)."""
    out = []
    for r in rows:
        on = r["total_bits"] > 0 and np.isfinite(r["mean"])
        sign = 1.0 if r["higher"] else -1.0
        for o in rows:
            if o is r or o["problem"] != r["problem"] or not (o["total_bits"] > 0 and np.isfinite(o["mean"])):
                continue
            if (
                o["total_bits"] <= r["total_bits"]
                and sign * o["mean"] >= sign * r["mean"]
                and (o["total_bits"] < r["total_bits"] or sign * o["mean"] > sign * r["mean"])
            ):
                on = False
                break
        out.append(bool(on))
    return out


def _level(point: Point) -> str:
    """``knob=value``; a link budget of null is one matching a round; no knob: empty."""
    if point.level is not None:
        return f"{point.method.knob}={point.level:g}"
    return "one matching a round" if point.method.knob == "link_budget" else ""


def write_report(points: Sequence[Point], missing: Mapping[str, str], out: Path) -> list[Path]:
    """``frontier.csv``, ``frontier.md`` and the figure in ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row(p) for p in points]
    for r, on in zip(rows, pareto(rows), strict=True):
        r["pareto"] = on
    add_bits_to_target(points, rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    replace_file(out / "frontier.csv", buf.getvalue())
    replace_file(out / "frontier.md", markdown(rows, missing))
    written = [out / "frontier.csv", out / "frontier.md"]
    if rows:
        written += draw(rows, out / "frontier")
    return written


def _num(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, int | float) and np.isfinite(v) else "-"


def _times(v: Any) -> str:
    """A ratio of bits as ``23.1x`` (``∞`` where the other sent none, ``-`` where undefined)."""
    if isinstance(v, int | float) and math.isinf(v):
        return "∞"
    return _num(v, ".3g") + ("x" if isinstance(v, int | float) and np.isfinite(v) else "")


def _to_target(r: Mapping[str, Any]) -> str:
    """Bits to target and the seeds that reached it: ``3.06e+07 (2/3)``, ``- (0/3)``."""
    reached = r.get("reached", "0/0")
    return "-" if reached.endswith("/0") else f"{_num(r.get('bits_to_target'), '.3g')} ({reached})"


def _target_note(r: Mapping[str, Any], metric: str) -> str:
    """The line under a problem's heading that says what its bits to target count."""
    goal = r.get("target", math.nan)
    if not np.isfinite(goal):
        return "Bits to target: no dFedU (whole models) point here, so no target."
    rule = "less 0.005, half an accuracy point" if r["higher"] else "times 1.005; lower is better"
    return (
        f"Bits to target: the bits a seed had sent by its first evaluation with test {metric} at or "
        f"{'above' if r['higher'] else 'below'} {goal:.4g} (dFedU whole's final {metric}, mean over "
        f"seeds, {rule}); the mean over the seeds that reached it, how many did in brackets. "
        "x fewer bits than dFedU: dFedU's bits to target over the method's (∞: it sent none)."
    )


def markdown(rows: Sequence[dict[str, Any]], missing: Mapping[str, str]) -> str:
    lines = ["# The communication frontier", ""]
    lines += [f"- {p}: {note}" for p, note in missing.items()]
    for problem in dict.fromkeys(r["problem"] for r in rows):
        mine = [r for r in rows if r["problem"] == problem]
        metric = mine[0]["metric"] or "metric"
        shown = f"test {metric}" + ("" if mine[0]["higher"] else " (lower is better)")
        lines += [
            "",
            f"## {problem}",
            "",
            _target_note(mine[0], metric),
            "",
            f"| method | compression | strength (validation) | {shown} | total bits | bits/round "
            "measured | bits/round formula | seconds | front | bits to target | x fewer bits than dFedU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in mine:
            value = _num(r["mean"], ".4g") + (f" ± {_num(r['se'], '.2g')}" if r["seeds"] > 1 else "")
            lines.append(
                f"| {r['method']} | {r['level'] or '-'} | {r['strength']} | {value} | "
                f"{_num(r['total_bits'], '.3g')} | "
                f"{_num(r['bits_per_round'], '.4g')} | {_num(r['bits_per_round_analytic'], '.4g')} | "
                f"{_num(r['seconds'], '.1f')} | {'**yes**' if r['pareto'] else ''} | "
                f"{_to_target(r)} | {_times(r.get('fewer_bits_than_dfedu'))} |"
            )
    return "\n".join(lines) + "\n"


def bit_axis(ax: Axes, bits: Sequence[float]) -> None:
    """A log bits axis over whole decades around ``bits`` (those above 0), labelled at powers of ten
    only (10^6, 10^7, ...; every other decade or sparser over a wide range, so labels never
    overlap), the minor ticks unlabelled."""
    ax.set_xscale("log")
    sent = [b for b in bits if b > 0 and np.isfinite(b)]
    if sent:
        lo = math.floor(math.log10(min(sent)) - 0.05)  # a point on a decade keeps its marker whole
        hi = math.ceil(math.log10(max(sent)) + 0.05)
        ax.set_xlim(10.0**lo, 10.0**hi)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,), numticks=7))
    ax.xaxis.set_major_formatter(LogFormatterSciNotation(base=10))
    ax.xaxis.set_minor_formatter(NullFormatter())


def draw(rows: Sequence[dict[str, Any]], stem: Path) -> list[Path]:
    """One panel per problem: the metric against total bits (log axis, :func:`bit_axis`), one line
    per method over its compression levels with a band of one standard error, the front circled,
    local training (no bits) as a dashed line, the bits-to-target level dotted."""
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    with paper_style():
        fig, axes = plt.subplots(1, len(problems), figsize=(4.6 * len(problems), 3.8), squeeze=False)
        for ax, problem in zip(axes[0], problems, strict=True):
            mine = [r for r in rows if r["problem"] == problem]
            for k, method in enumerate(methods):
                pts = sorted((r for r in mine if r["method"] == method), key=lambda r: r["total_bits"])
                pts = [r for r in pts if np.isfinite(r["mean"])]
                if not pts:
                    continue
                if pts[0]["total_bits"] <= 0:  # local training: no bits
                    ax.axhline(pts[0]["mean"], color="0.4", linestyle="--", linewidth=1, label=method)
                    continue
                x = np.array([r["total_bits"] for r in pts])
                y = np.array([r["mean"] for r in pts])
                se = np.array([r["se"] for r in pts])
                style = "--" if "budgeted links" in method else "-"  # the link budget's axis: dashed
                ax.plot(x, y, marker=marker(k), color=color(k), linestyle=style, label=method, markersize=5)
                ax.fill_between(x, y - se, y + se, color=color(k), alpha=0.15, linewidth=0)
            front = sorted((r for r in mine if r["pareto"]), key=lambda r: r["total_bits"])
            if front:
                ax.plot(
                    [r["total_bits"] for r in front],
                    [r["mean"] for r in front],
                    linestyle="none",
                    marker="o",
                    markersize=11,
                    markerfacecolor="none",
                    markeredgecolor="black",
                    label="Pareto front",
                )
            goal = mine[0].get("target", math.nan)
            if np.isfinite(goal):
                ax.axhline(goal, color="0.55", linestyle=":", linewidth=1, label="bits-to-target level")
            bit_axis(ax, [r["total_bits"] for r in mine])
            ax.set_xlabel("total bits sent (log)")
            metric = mine[0]["metric"] or "metric"
            ax.set_ylabel(f"test {metric}" + (" (lower is better)" if not mine[0]["higher"] else ""))
            ax.set_title(problem)
        seen: dict[str, Any] = {}
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
        fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(5, len(seen)), frameon=False)
        legend_rows = math.ceil(len(seen) / 5)
        fig.tight_layout(rect=(0, 0.03 + 0.045 * legend_rows, 1, 1))
        return save_figure(fig, stem)
