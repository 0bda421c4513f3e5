"""What a run folder's ``metrics.csv`` and ``summary.json`` hold, for their readers (plots,
the command line) and their writer (:mod:`sheaf_fmtl.runtime.run.folder.recorder`): the columns, the
columns read back, and the lines the terminal shows of a summary."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from ..data.bounded import LARGE, UnboundedFile, read_text_bounded

#: Columns of ``metrics.csv``; ``test_metric`` is written as the evaluated metric's column,
#: ``test_accuracy`` / ``test_mse`` on the test split, ``val_accuracy`` / ``val_mse`` on a validation
#: split (``validation > 0``): :func:`metric_column`.
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
    "clients_present",  # the clients the evaluation averages over (joined, with data in the split)
)
LEGACY_METRIC_COLUMN = "test_metric"  # the metric column's name before it said which metric it is
#: What :func:`read_metrics` also keys the evaluated metric's column by, whatever its split and name.
METRIC = "metric"
#: The prefix of the evaluated metric's column per split (``summary.json``'s ``evaluated_on``).
PREFIXES = {"test": "test_", "validation": "val_"}


def split_of(validation: float) -> str:
    """The split a run's evaluations score: ``validation`` when it holds one out, else ``test``."""
    return "validation" if validation > 0 else "test"


def metric_column(metric: str, split: str = "test") -> str:
    """The ``metrics.csv`` column of the evaluated metric: ``test_accuracy`` / ``test_mse`` on the
    test split, ``val_accuracy`` / ``val_mse`` on the validation split."""
    return f"{PREFIXES[split]}{metric}"


def evaluated_split(columns: dict[str, list[float]]) -> str:
    """The split the metric column of :func:`read_metrics`' columns was scored on."""
    return "validation" if any(c.startswith(PREFIXES["validation"]) for c in columns) else "test"


def read_metrics(run_dir: str | Path) -> dict[str, list[float]]:
    """Columns of ``metrics.csv`` as float lists (missing values as NaN), keyed by their names
    (``test_accuracy``, ``val_accuracy``, ``test_mse``, ...), the metric column also under
    :data:`METRIC`. Older files are read too: a ``test_metric`` column is named from
    ``summary.json``'s metric, and a ``test_*`` column of a run whose ``summary.json`` says
    ``evaluated_on: validation`` (written before validation had its own names) as ``val_*``."""
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
    named = [c for c in header if c.startswith(tuple(PREFIXES.values())) and c != LEGACY_METRIC_COLUMN]
    if not named and LEGACY_METRIC_COLUMN in columns:
        metric = _summary_field(run_dir, "metric")
        named = [LEGACY_METRIC_COLUMN if metric is None else metric_column(metric)]
        columns[named[0]] = columns[LEGACY_METRIC_COLUMN]
    if named and named[0].startswith("test_") and _summary_field(run_dir, "evaluated_on") == "validation":
        values = columns.pop(named[0])
        columns.pop(LEGACY_METRIC_COLUMN, None)
        named = [_as_validation(named[0])]
        columns[named[0]] = values
    if named:
        columns[METRIC] = columns[named[0]]
    return columns


def _as_validation(column: str) -> str:
    """An old validation run's ``test_*`` metric column under its name, ``val_*``."""
    prefix = PREFIXES["test"]
    return PREFIXES["validation"] + column[len(prefix) :] if column.startswith(prefix) else column


def _summary_field(run_dir: Path, key: str) -> str | None:
    try:
        return str(json.loads(read_text_bounded(run_dir / "summary.json"))[key])
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
    elif isinstance(summary.get("stop_at_last_round"), dict):  # a stop asked for once every round ran
        done = f" (ran all {summary['rounds']} rounds; {summary['stop_at_last_round'].get('by')} asked to "
        done += "stop at the last one)"
    tested = [v for v in summary.get("per_client") or [] if v is not None]
    over = f"{summary['num_clients']}"
    if summary.get("per_client") and len(tested) < summary["num_clients"]:  # clients without test data
        over = f"{len(tested)} of {summary['num_clients']}"
    text = (
        f"{summary['algorithm']} on {summary['dataset']}{done}: "
        f"final mean {summary.get('evaluated_on', 'test')} {summary['metric']} = {value} "
        f"over {over} clients, "
        f"{summary['transmitted_bits']:,} bits transmitted, {summary['wall_seconds']:.1f} s"
    )
    best = summary.get(f"best_test_{summary['metric']}")
    if best is not None:  # a validation split chose the best models: their test score
        text += (
            f"\nbest models (round {summary.get('best_round')}): mean test {summary['metric']} = {best:.4f}"
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
