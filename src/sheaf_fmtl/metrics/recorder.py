"""Run folder writer: ``metrics.csv`` (flushed per evaluation, so nothing is lost on failure),
``summary.json``, ``config.yaml`` and the final checkpoint."""

from __future__ import annotations

import csv
import json
import math
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig, save_config

METRIC_COLUMNS = (
    "round", "test_metric", "train_loss", "objective", "sheaf_energy", "transmitted_bits", "wall_seconds",
)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


class Recorder:
    def __init__(self, out_dir: str | Path, config: RunConfig) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        save_config(config, self.dir / "config.yaml")
        self._file = open(self.dir / "metrics.csv", "w", newline="")
        self._csv = csv.writer(self._file)
        self._csv.writerow(METRIC_COLUMNS)
        self._file.flush()
        self.rows: list[dict[str, float]] = []

    def log(self, row: dict[str, float]) -> None:
        self.rows.append(row)
        self._csv.writerow(["" if row.get(c) is None else _fmt(row[c]) for c in METRIC_COLUMNS])
        self._file.flush()

    def checkpoint(self, payload: dict[str, Any]) -> None:
        torch.save(payload, self.dir / "checkpoint.pt")

    def summary(self, payload: dict[str, Any]) -> None:
        (self.dir / "summary.json").write_text(json.dumps(payload, indent=2) + "\n")

    def close(self) -> None:
        self._file.close()


def _fmt(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v)) if math.isfinite(v) else ""


def read_metrics(run_dir: str | Path) -> dict[str, list[float]]:
    """Columns of ``metrics.csv`` as float lists (missing values as NaN)."""
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {c: [float(r[c]) if r.get(c) else math.nan for r in rows] for c in METRIC_COLUMNS}


def format_summary(summary: dict[str, Any], out: Path | str) -> str:
    """Two lines for the terminal: the final metric, bits and time of a run, and where it went."""
    return (
        f"{summary['algorithm']} on {summary['dataset']}: "
        f"final mean test {summary['metric']} = {summary['final']:.4f} "
        f"over {summary['num_clients']} clients, "
        f"{summary['transmitted_bits']:,} bits transmitted, {summary['wall_seconds']:.1f} s\n"
        f"results: {out}/ (config.yaml, metrics.csv, summary.json, checkpoint.pt)"
    )
