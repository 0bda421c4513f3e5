"""Markdown and CSV tables: our numbers (mean ± standard error over seeds) beside the paper's.

Used by ``reproduce`` (rows = the experiment's settings, paper column filled) and by ``table``
(rows = any run folders grouped by config up to the seed, paper column "—").
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.files import replace_file
from ..config.usage import reads
from ..metrics.aggregate import SeedStats, aggregate_runs, format_pm, read_summary
from ..metrics.groups import differing_keys, group_by_config
from .paper import Experiment

NO_PAPER = "—"
#: Keys left out of ``table``'s row labels (seed: the rows are means over seeds).
NOT_A_SETTING = ("seed", "eval_every")


@dataclass
class Row:
    """One table row: its run folders (one per seed), the paper's cells and a status note."""

    dataset: str
    label: str
    slug: str
    runs: list[Path] = field(default_factory=list)
    paper: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


#: What a metric column measured: (the split it was scored on, the metric's name).
Measured = tuple[str, str]


def _header(col: str, spec: Experiment, measured: Measured) -> str:
    if col == "metric":
        split, metric = measured
        name = {"mse": "MSE"}.get(metric, metric)
        return f"{split} {name}" + (" (%)" if spec.percent and metric == "accuracy" else "")
    if col == "bits":
        return f"transmitted bits ({spec.bits_unit[0]})"
    if col == "flops":
        return f"FLOPs ({(spec.flops_unit or FLOPS_UNITS[0])[0]})"
    return {"memory": "peak memory (MB)", "time": "wall time (s)"}[col]


def _measured(agg: Mapping[str, Any]) -> Measured:
    return str(agg.get("evaluated_on", "test")), str(agg["metric"])


def _ours(col: str, agg: Mapping[str, Any], spec: Experiment) -> tuple[SeedStats, float, str]:
    """(stats, scale, format) of one column."""
    if col == "metric":
        pct = spec.percent and agg["metric"] == "accuracy"
        return agg["final"], 100.0 if pct else 1.0, ".2f" if pct else ".4f"
    if col == "bits":
        return agg["transmitted_bits"], 1.0 / spec.bits_unit[1], ".4g"
    if col == "flops":
        return agg["flops"], 1.0 / (spec.flops_unit or FLOPS_UNITS[0])[1], ".4g"
    if col == "time":
        return agg["wall_seconds"], 1.0, ".3g"
    return agg["peak_rss_bytes"], 1e-6, ".1f"


#: FLOPs units for a table that picks its own (``Experiment.flops_unit = None``), largest first.
FLOPS_UNITS = (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3), ("FLOP", 1.0))


def _flops_unit(aggs: Sequence[Mapping[str, Any] | None]) -> tuple[str, float]:
    """The largest unit of :data:`FLOPS_UNITS` that leaves the largest mean at least 1."""
    top = max((a["flops"].mean or 0.0 for a in aggs if a), default=0.0)
    return next((u for u in FLOPS_UNITS if top >= u[1]), FLOPS_UNITS[-1])


def _cell_text(col: str, agg: Mapping[str, Any], spec: Experiment) -> str:
    stats, scale, fmt = _ours(col, agg, spec)
    text = format_pm(stats, scale, fmt)
    cuda: SeedStats = agg["cuda_max_allocated_bytes"]
    if col == "memory" and cuda.mean is not None:
        text += f" (CUDA max allocated {format_pm(cuda, 1e-6, '.1f')})"
    return text


def _columns(spec: Experiment, aggs: Sequence[Mapping[str, Any] | None]) -> list[tuple[str, Measured]]:
    """The table's columns: the experiment's, its metric column once per metric and split the rows
    measured (accuracy never shares a column with MSE, nor a validation score with a test score)."""
    measured = list(dict.fromkeys(_measured(a) for a in aggs if a and a["metric"] != "metric"))
    measured = measured or [("test", "accuracy")]
    return [(c, m) for c in spec.columns for m in (measured if c == "metric" else measured[:1])]


def _status(row: Row, agg: Mapping[str, Any] | None) -> str:
    if row.note:
        return row.note
    if agg is None or not row.runs:
        return "not run yet"
    statuses = agg["status"]
    done = sum(s in ("ok", "finished", "complete") for s in statuses)
    parts = [f"{done}/{len(statuses)} seeds finished"]
    for bad in ("diverged", "refused"):
        if bad in statuses:
            idx = statuses.index(bad)
            msg = (read_summary(row.runs[idx]) or {}).get("message", "")
            parts.append(f"{statuses.count(bad)} {bad}" + (f": {msg.splitlines()[0][:160]}" if msg else ""))
    return "; ".join(parts)


def render(rows: Sequence[Row], spec: Experiment, out_stem: str | Path) -> tuple[Path, Path]:
    """Write ``OUT_STEM.md`` and ``OUT_STEM.csv``; returns their paths."""
    md, text = compose(rows, spec)
    stem = Path(out_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    md_path, csv_path = stem.with_suffix(".md"), stem.with_suffix(".csv")
    replace_file(md_path, md)
    replace_file(csv_path, text)
    return md_path, csv_path


def compose(rows: Sequence[Row], spec: Experiment) -> tuple[str, str]:
    """The table as Markdown and as CSV text."""
    aggs = [aggregate_runs(r.runs) if r.runs else None for r in rows]
    if spec.flops_unit is None:
        spec = dataclasses.replace(spec, flops_unit=_flops_unit(aggs))
    columns = _columns(spec, aggs)
    mixed = len({m for c, m in columns if c == "metric"}) > 1
    heads = [_header(c, spec, m) for c, m in columns]
    md = [f"# {spec.title}", "", f"Paper: {spec.reference}. Ours: mean ± standard error over seeds.", ""]
    cols = ["dataset", "setting", "seeds"]
    for h in heads:
        cols += [f"ours: {h}", f"paper: {h}"]
    md += ["| " + " | ".join([*cols, "status"]) + " |", "|" + " --- |" * (len(cols) + 1)]
    csv_rows: list[dict[str, Any]] = []
    known = [(r, a) for r, a in zip(rows, aggs, strict=True) if a and a["metric"] != "metric"]
    by_dataset = {r.dataset: _measured(a) for r, a in known}
    for row, agg in zip(rows, aggs, strict=True):
        status = _status(row, agg)
        seeds = str(agg["final"].n) if agg else "0"
        cells = [row.dataset, row.label, seeds]
        mine = by_dataset.get(row.dataset, columns[0][1])  # (a row not run yet: its dataset's)
        mine = _measured(agg) if agg and agg["metric"] != "metric" else mine
        rec: dict[str, Any] = {
            "experiment": spec.name,
            "dataset": row.dataset,
            "setting": row.label,
            "slug": row.slug,
            "seeds": seeds,
            "status": status,
            "evaluated_on": mine[0],
            "metric": mine[1],
        }
        for col, measured in columns:
            other = col == "metric" and measured != mine  # a column of another row's metric
            ours = "" if other else _cell_text(col, agg, spec) if agg else "n/a"
            paper = "" if other else row.paper.get(col, NO_PAPER)
            cells += [ours, paper]
            stats, scale, _ = _ours(col, agg, spec) if agg else (SeedStats(None, None, 0, ()), 1.0, "")
            name = f"{col}_{measured[0]}_{measured[1]}" if col == "metric" and mixed else col
            rec[f"ours_{name}"] = "" if stats.mean is None or other else stats.mean * scale
            rec[f"ours_{name}_se"] = "" if stats.se is None or other else stats.se * scale
            rec[f"paper_{name}"] = paper
        md.append("| " + " | ".join([*cells, status]).replace("\n", " ") + " |")
        csv_rows.append(rec)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(csv_rows[0]) if csv_rows else ["experiment"])
    writer.writeheader()
    writer.writerows(csv_rows)
    return "\n".join(md) + "\n", text.getvalue()


def group_runs(run_dirs: Sequence[str | Path]) -> list[Row]:
    """Rows of run folders whose configs differ only in the seed (and bookkeeping keys, see
    :func:`sheaf_fmtl.metrics.groups.group_by_config`), labelled by the keys that differ between rows
    and that the row's runs read (no ``lam`` for local training, no ``gamma`` for dFedU).

    Raises:
        FileNotFoundError: a path is not a run folder with a ``summary.json``.
    """
    for d in run_dirs:
        if not Path(d).is_dir():
            what = "no such folder" if not Path(d).exists() else "a file"
            raise FileNotFoundError(f"{d} is not a run folder ({what})")
        if read_summary(d) is None:
            raise FileNotFoundError(
                f"{Path(d) / 'summary.json'} is missing or unreadable: {d} is not a finished run folder"
            )
    groups = group_by_config(run_dirs, ignore=("seed",))
    keys = [
        k for k in differing_keys([g.config for g in groups]) if k not in NOT_A_SETTING and k != "dataset"
    ]
    rows = []
    for g in groups:
        label = ", ".join(f"{k}={g.config.get(k)}" for k in keys if reads(g.config, k))
        label = label or str(g.config.get("algorithm"))
        rows.append(Row(str(g.config.get("dataset")), label, label, runs=list(g.runs)))
    return rows


def table_spec(title: str = "Runs") -> Experiment:
    """The column layout of ``sheaf-fmtl table``: every column, accuracy as a fraction, bits in MB,
    FLOPs in the unit that fits them."""
    return Experiment(
        name="table",
        title=title,
        reference="none (any run folders)",
        datasets=(),
        settings=(),
        columns=("metric", "bits", "flops", "memory", "time"),
        paper={},
        percent=False,
        flops_unit=None,
    )
