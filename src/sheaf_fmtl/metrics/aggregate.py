"""Mean and standard error over seeds, from finished run folders (``summary.json``).

The paper reports "the average test accuracy/MSE and its corresponding one standard error ... based
on five runs" (Section 5, Evaluation): standard error = sample standard deviation (``n - 1``) over
``sqrt(n)``. ``sheaf-fmtl run --seeds`` writes ``aggregate.json`` / ``aggregate.md`` with
:func:`write_aggregate`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from ..config.files import replace_file
from ..data.bounded import LARGE, read_text_bounded

#: Statuses of a run that finished, all its rounds run (``ok`` is what
#: :func:`sheaf_fmtl.runtime.run.loop.run` writes): the runs whose final metric the mean over seeds
#: takes. A run stopped by a callback (``stopped``) is not one, though its final state holds its
#: trained models (:data:`.final.TRAINED`).
FINISHED = ("ok", "finished", "complete")
#: ``metrics.csv`` names of the evaluated metric, old and new (``val_*``: a validation split's).
METRIC_COLUMNS = ("test_metric", "test_accuracy", "test_mse", "val_accuracy", "val_mse")
#: Quantities aggregated over seeds: name -> summary.json key.
QUANTITIES = {
    "final": "final",
    "transmitted_bits": "transmitted_bits",
    "flops": "flops",
    "peak_rss_bytes": "peak_rss_bytes",
    "cuda_max_allocated_bytes": "cuda_max_allocated_bytes",
    "wall_seconds": "wall_seconds",
}


@dataclass(frozen=True)
class SeedStats:
    """``mean`` and ``se`` (``None`` when undefined) of ``values`` over ``n`` seeds."""

    mean: float | None
    se: float | None
    n: int
    values: tuple[float, ...]


def seed_stats(values: Sequence[float | None]) -> SeedStats:
    """Mean and standard error ``s / sqrt(n)``, ``s`` the sample standard deviation (``ddof = 1``).

    Args:
        values: one number per seed; ``None`` and NaN (a diverged seed, a missing field) are left out.
    Returns:
        :class:`SeedStats`; ``mean`` is ``None`` with no value, ``se`` is ``None`` with fewer than two.
    """
    xs = tuple(float(v) for v in values if v is not None and math.isfinite(float(v)))
    n = len(xs)
    if n == 0:
        return SeedStats(None, None, 0, xs)
    mean = sum(xs) / n
    if n == 1:
        return SeedStats(mean, None, 1, xs)
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return SeedStats(mean, math.sqrt(var) / math.sqrt(n), n, xs)


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``summary.json`` of a run folder, or ``None`` when it is absent or unreadable."""
    path = Path(run_dir) / "summary.json"
    try:
        summary = json.loads(read_text_bounded(path))
    except (OSError, ValueError):  # (JSON and UTF-8 errors are ValueErrors)
        return None
    return summary if isinstance(summary, dict) else None


def final_metric(run_dir: str | Path, summary: dict[str, Any] | None = None) -> float | None:
    """The run's final evaluated metric: ``summary.json``'s ``final``, else the last value of the
    metric column of ``metrics.csv`` (``test_metric``, ``test_accuracy``, ``val_accuracy``, ...)."""
    summary = read_summary(run_dir) if summary is None else summary
    if summary is not None and summary.get("final") is not None:
        return float(summary["final"])
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return None
    try:
        rows = list(csv.DictReader(io.StringIO(read_text_bounded(path, LARGE), newline="")))
    except (OSError, ValueError, csv.Error):
        return None
    for row in reversed(rows):
        for col in METRIC_COLUMNS:
            if row.get(col):
                return float(row[col])
    return None


def aggregate_runs(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """Per-quantity :class:`SeedStats` over the run folders (one per seed), plus their seeds,
    statuses, metric name (``accuracy`` / ``mse``) and the split it was scored on (``evaluated_on``:
    ``test``, or ``validation`` when a run held one out)."""
    summaries = [(Path(d), read_summary(d) or {}) for d in run_dirs]
    out: dict[str, Any] = {
        "runs": [str(d) for d, _ in summaries],
        "seeds": [s.get("seed") for _, s in summaries],
        "status": [s.get("status", "missing") for _, s in summaries],
        "metric": next((s["metric"] for _, s in summaries if s.get("metric")), "metric"),
        "evaluated_on": next((str(s["evaluated_on"]) for _, s in summaries if s.get("evaluated_on")), "test"),
    }
    for name, key in QUANTITIES.items():
        vals: list[float | None] = []
        for d, s in summaries:
            try:
                if name == "final":
                    vals.append(final_metric(d, s) if s.get("status", "ok") in FINISHED else None)
                else:
                    vals.append(None if s.get(key) is None else float(s[key]))
            except (TypeError, ValueError):  # named: the file, the key
                where = d / "summary.json" if (d / "summary.json").is_file() else d / "metrics.csv"
                raise ValueError(f"{where}: '{key}' is not a number; the file is damaged") from None
        out[name] = seed_stats(vals)
    return out


def format_pm(stats: SeedStats, scale: float = 1.0, spec: str = ".4f") -> str:
    """``mean ± se`` (times ``scale``, format ``spec``), ``mean`` alone for one seed, ``n/a``
    without values."""
    if stats.mean is None:
        return "n/a"
    text = format(stats.mean * scale, spec)
    return text if stats.se is None else f"{text} ± {format(stats.se * scale, spec)}"


def write_aggregate(run_dirs: Sequence[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Write ``aggregate.json`` (mean, standard error and per-seed values of every quantity) and
    ``aggregate.md`` (one line per quantity) into ``out_dir``; returns the JSON payload."""
    agg = aggregate_runs(run_dirs)
    plain = {k: (asdict(v) if isinstance(v, SeedStats) else v) for k, v in agg.items()}
    payload = json.loads(json.dumps(plain))  # tuples as lists, as read back from the file
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    replace_file(out / "aggregate.json", json.dumps(payload, indent=2) + "\n")
    lines = [
        f"# Aggregate over seeds {', '.join(str(s) for s in agg['seeds'])}",
        "",
        "| quantity | mean ± standard error | seeds | per seed |",
        "| --- | --- | --- | --- |",
    ]
    for name in QUANTITIES:
        st: SeedStats = agg[name]
        label = f"final {agg['evaluated_on']} {agg['metric']}" if name == "final" else name
        per_seed = ", ".join(f"{v:.6g}" for v in st.values) or "n/a"
        lines.append(f"| {label} | {format_pm(st, spec='.6g')} | {st.n} | {per_seed} |")
    replace_file(out / "aggregate.md", "\n".join(lines) + "\n")
    return cast("dict[str, Any]", payload)
