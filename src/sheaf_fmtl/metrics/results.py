"""What a run folder's ``metrics.csv`` and ``summary.json`` hold, for their readers (plots,
the command line) and their writer (:mod:`sheaf_fmtl.runtime.run.recorder`): the columns, the
columns read back, and the lines the terminal shows of a summary."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from ..data.bounded import LARGE, UnboundedFile, read_text_bounded

#: Columns of ``metrics.csv``; ``test_metric`` is written as ``test_accuracy`` or ``test_mse``.
METRIC_COLUMNS = (
    "round",
    "test_metric",
    "train_loss",
    "objective",
    "sheaf_energy",
    "transmitted_bits",
    "rejected_messages",  # received but invalid (shape, dtype, non-finite); runtime/engine/faults.py
    "dropped_messages",  # lost to drop_prob / link_drop_prob
    "wall_seconds",
)
LEGACY_METRIC_COLUMN = "test_metric"  # the metric column's name before it said which metric it is


def metric_column(metric: str) -> str:
    """The ``metrics.csv`` column of the test metric: ``test_accuracy`` or ``test_mse``."""
    return f"test_{metric}"


def read_metrics(run_dir: str | Path) -> dict[str, list[float]]:
    """Columns of ``metrics.csv`` as float lists (missing values as NaN), keyed by their names
    (``test_accuracy`` or ``test_mse``). Files written before the rename (a ``test_metric`` column)
    are read too, their column named from ``summary.json``'s metric. ``test_metric`` is also kept
    as an alias of the metric column, for readers that do not care which metric it is."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.csv"
    try:
        reader = csv.DictReader(io.StringIO(read_text_bounded(path, LARGE), newline=""))
        header = list(reader.fieldnames or [])
        rows = list(reader)
        columns = {c: [float(r[c]) if r.get(c) else math.nan for r in rows] for c in header}
    except UnboundedFile as e:  # a link to /dev/zero, a file of gigabytes
        raise ValueError(str(e)) from None
    except (ValueError, TypeError, csv.Error) as e:  # not UTF-8, not numbers, ragged rows
        raise ValueError(
            f"{path} cannot be read as metrics ({type(e).__name__}); is it a run's file?"
        ) from None
    named = [c for c in header if c.startswith("test_") and c != LEGACY_METRIC_COLUMN]
    if LEGACY_METRIC_COLUMN in columns and not named:
        metric = _summary_metric(run_dir)
        if metric is not None:
            columns[metric_column(metric)] = columns[LEGACY_METRIC_COLUMN]
    elif named:
        columns[LEGACY_METRIC_COLUMN] = columns[named[0]]
    return columns


def _summary_metric(run_dir: Path) -> str | None:
    try:
        return str(json.loads(read_text_bounded(run_dir / "summary.json"))["metric"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def format_summary(summary: dict[str, Any], out: Path | str | None) -> str:
    """Two lines for the terminal: the final metric, bits and time of a run, and where it went
    (an interrupted run: its last evaluated metric and the rounds done)."""
    final = summary["final"]
    value = "n/a" if final is None else f"{final:.4f}"
    done = ""
    if summary.get("status") == "interrupted":
        done = f" (interrupted after {summary.get('rounds_done')} of {summary['rounds']} rounds)"
    elif summary.get("status") == "stopped":
        by, done_rounds = summary.get("stopped_by"), summary.get("rounds_done")
        done = f" (stopped by {by} after {done_rounds} of {summary['rounds']} rounds)"
    tested = [v for v in summary.get("per_client") or [] if v is not None]
    over = f"{summary['num_clients']}"
    if summary.get("per_client") and len(tested) < summary["num_clients"]:  # clients without test data
        over = f"{len(tested)} of {summary['num_clients']}"
    text = (
        f"{summary['algorithm']} on {summary['dataset']}{done}: "
        f"final mean test {summary['metric']} = {value} "
        f"over {over} clients, "
        f"{summary['transmitted_bits']:,} bits transmitted, {summary['wall_seconds']:.1f} s"
    )
    if out is not None:
        text += f"\nresults: {out}/ (config.yaml, metrics.csv, summary.json, checkpoint.pt)"
    return text


def interrupted_line(summary: dict[str, Any], out: Path | str) -> str:
    """The one line printed when a run was stopped by a signal (its results are in ``out``)."""
    return (
        f"sheaf-fmtl: stopped by {summary['signal']} after round {summary['rounds_done']} of "
        f"{summary['rounds']}; results so far in {out}/ (summary.json status: interrupted); continue it "
        f"with: sheaf-fmtl run --resume {out}"
    )


def interrupted_status(summary: dict[str, Any]) -> int:
    """The exit status of a run stopped by ``summary['signal']``: 128 + the signal's number."""
    import signal

    return 128 + int(signal.Signals[summary["signal"]])
