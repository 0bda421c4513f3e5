"""Run folder writer: ``metrics.csv`` (flushed per evaluation, so nothing is lost on failure),
``summary.json``, ``config.yaml`` and the final checkpoint; or, without a folder, the rows in memory."""

from __future__ import annotations

import csv
import io
import json
import math
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from ..._version import __version__
from ...config import RunConfig, save_config
from ...config.files import replace_file

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


def software_versions() -> dict[str, str]:
    """What produced a run (recorded in ``config.yaml`` and ``summary.json``)."""
    return {"sheaf_fmtl": __version__, "torch": str(torch.__version__)}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process: ``VmHWM`` on Linux (``ru_maxrss`` survives ``exec``
    and would report the parent's peak in a fresh child), else ``ru_maxrss`` (KiB on Linux, bytes
    on macOS)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)


class Recorder:
    """Rows of evaluated rounds (``log`` takes them with the key ``test_metric``), and the run
    folder when ``out_dir`` is given (created here: callers check and clear it before,
    :mod:`sheaf_fmtl.runtime.run.rundir`).

    ``rows``: a resumed run's rows up to its checkpoint (as :attr:`rows` held them);
    ``metrics.csv`` is rewritten with exactly these (rows evaluated after the checkpoint by the
    stopped run are dropped: the resumed run evaluates them again) and the run appends to it."""

    def __init__(
        self,
        out_dir: str | Path | None,
        config: RunConfig,
        metric: str = "accuracy",
        rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.dir = None if out_dir is None else Path(out_dir)
        self.config = config
        self.column = metric_column(metric)
        self.columns = tuple(self.column if c == LEGACY_METRIC_COLUMN else c for c in METRIC_COLUMNS)
        self.rows: list[dict[str, Any]] = list(rows or [])
        self._file = None
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        save_config(config, self.dir / "config.yaml", {"versions": software_versions()})
        path, text = self.dir / "metrics.csv", io.StringIO()
        writer = csv.writer(text, lineterminator="\n")  # header and the rows so far, written whole
        writer.writerow(self.columns)
        writer.writerows(self._cells(r) for r in self.rows)
        replace_file(path, text.getvalue())
        self._file = open(path, "a", newline="")
        self._csv = csv.writer(self._file, lineterminator="\n")

    def _cells(self, named: dict[str, Any]) -> list[str]:
        return ["" if named.get(c) is None else _fmt(named[c]) for c in self.columns]

    def log(self, row: dict[str, Any]) -> None:
        """One evaluated round; ``row["test_metric"]`` is stored under :attr:`column`."""
        named = {self.column if k == LEGACY_METRIC_COLUMN else k: v for k, v in row.items()}
        self.rows.append(named)
        if self._file is not None:
            self._csv.writerow(self._cells(named))
            self._file.flush()

    def checkpoint(self, payload: dict[str, Any]) -> None:
        if self.dir is not None:
            replace_file(self.dir / "checkpoint.pt", lambda f: torch.save(payload, f))

    def summary(self, payload: dict[str, Any]) -> None:
        """Write ``summary.json`` whole or not at all (a temporary file renamed onto it)."""
        if self.dir is not None:
            replace_file(self.dir / "summary.json", json.dumps(payload, indent=2) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _fmt(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v)) if math.isfinite(v) else ""


def read_metrics(run_dir: str | Path) -> dict[str, list[float]]:
    """Columns of ``metrics.csv`` as float lists (missing values as NaN), keyed by their names
    (``test_accuracy`` or ``test_mse``). Files written before the rename (a ``test_metric`` column)
    are read too, their column named from ``summary.json``'s metric. ``test_metric`` is also kept
    as an alias of the metric column, for readers that do not care which metric it is."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.csv"
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = list(reader)
        columns = {c: [float(r[c]) if r.get(c) else math.nan for r in rows] for c in header}
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
        return str(json.loads((run_dir / "summary.json").read_text())["metric"])
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
