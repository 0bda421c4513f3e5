"""A run folder's recorded curve: its config, its metric (accuracy or MSE) and, per evaluated
round, the metric (on the test split, or the validation split it was scored on) and the bits
transmitted so far."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..metrics.aggregate import read_summary
from ..metrics.groups import read_config
from ..metrics.results import METRIC, PREFIXES, evaluated_split, read_metrics


@dataclass(frozen=True)
class RunRecord:
    """One run folder, as plotted.

    Attributes:
        path: the run folder.
        config: its ``config.yaml``.
        metric: ``accuracy``, ``mse`` or ``""`` (unknown: an old folder without ``summary.json``).
        rounds, values, bits: per evaluated round, the round, the evaluated metric (NaN where not
            recorded) and the bits the whole network had transmitted.
        split: what the metric was scored on: ``test``, or ``validation`` (``val_*`` columns, or an
            older folder's ``test_*`` columns with ``summary.json``'s ``evaluated_on: validation``).
    """

    path: Path
    config: dict[str, Any]
    metric: str
    rounds: np.ndarray
    values: np.ndarray
    bits: np.ndarray
    split: str = "test"

    @property
    def dataset(self) -> str:
        """The dataset's name (``file:PATH`` shortened to the file's name)."""
        name = str(self.config.get("dataset", "?"))
        return Path(name[5:]).name if name.startswith("file:") else name


def load_run(run_dir: str | Path) -> RunRecord:
    """Read ``config.yaml``, ``metrics.csv`` (the metric column ``test_accuracy`` / ``test_mse``,
    ``val_accuracy`` / ``val_mse`` for a validation split, or ``test_metric`` in older folders) and,
    if present, ``summary.json`` of a run folder.

    Raises:
        FileNotFoundError: not a run folder.
        ValueError: ``metrics.csv`` has no evaluated round (empty, header only, or no metric value).
    """
    path = Path(run_dir)
    csv_path = path / "metrics.csv"
    if not csv_path.is_file():
        what = "no such folder" if not path.exists() else "a file" if not path.is_dir() else "no metrics.csv"
        raise FileNotFoundError(f"{path} is not a run folder ({what})")
    config = read_config(path)
    columns = read_metrics(path)
    values = np.array(columns.get(METRIC, []), dtype=float)  # alias of the metric column
    if not np.isfinite(values).any():
        raise ValueError(f"nothing to plot: {csv_path} has no evaluated rounds")
    split = evaluated_split(columns)
    metric = next((m for m in ("accuracy", "mse") if PREFIXES[split] + m in columns), "")
    summary = path / "summary.json"
    if summary.is_file():
        saved = read_summary(path)
        if saved is None:
            raise ValueError(f"{summary} cannot be read (not a JSON object); is it a run's file?")
        metric = str(saved.get("metric") or metric)
    nan = [float("nan")] * len(values)
    return RunRecord(
        path=path,
        config=config,
        metric=metric,
        rounds=np.array(columns.get("round", nan), dtype=float),
        values=values,
        bits=np.array(columns.get("transmitted_bits", nan), dtype=float),
        split=split,
    )
