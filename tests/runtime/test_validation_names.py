"""What was measured is named: a run that scores a validation split (``validation > 0``) writes
``val_*`` columns, hands its callbacks ``val_*`` rows, and is plotted and tabled as a validation
score; ``test_*`` names only the test split. Older folders (``test_*`` columns while
``summary.json`` says ``evaluated_on: validation``) are read under the right names."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
import yaml

import sheaf_fmtl
from sheaf_fmtl.metrics.aggregate import aggregate_runs, write_aggregate
from sheaf_fmtl.metrics.results import METRIC, format_summary, read_metrics
from sheaf_fmtl.plots.curves import metric_figure
from sheaf_fmtl.plots.records import load_run

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

TINY = {"dataset": "synthetic", "clients": 3, "rounds": 2, "eval_every": 1, "batch_size": 8}


class _Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] = []

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: Any) -> None:  # noqa: ANN401
        self.columns.append(view.metric_column)
        if metrics is not None:
            self.rows.append(metrics)


@pytest.mark.parametrize(("validation", "column"), [(0.25, "val_accuracy"), (0.0, "test_accuracy")])
def test_the_columns_rows_and_labels_name_the_split(tmp_path: Path, validation: float, column: str) -> None:
    seen = _Rows()
    result = sheaf_fmtl.run(out=tmp_path / "r", callbacks=[seen], validation=validation, **TINY)
    header = (tmp_path / "r" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert column in header and not [c for c in header if c.startswith(("test_", "val_")) and c != column]
    assert all(column in r for r in seen.rows) and set(seen.columns) == {column}
    assert all(column in r for r in result.metrics)
    split = "validation" if validation else "test"
    assert result.summary["evaluated_on"] == split
    assert f"final mean {split} accuracy" in format_summary(result.summary, None)
    record = load_run(tmp_path / "r")
    assert record.split == split and record.metric == "accuracy"
    fig = metric_figure([record])
    assert fig.axes[0].get_ylabel() == f"{split} accuracy"
    plt.close(fig)


def _old_folder(root: Path, name: str, column: str, evaluated_on: str | None, **config: Any) -> Path:
    """A run folder as written before validation had its own names."""
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"dataset": "school", "algorithm": "local", **config}))
    with open(run / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows([["round", column, "transmitted_bits"], [0, 0.5, 0], [5, 0.25, 0]])
    summary = {"metric": "mse", "final": 0.25, "status": "ok", "seed": 0}
    if evaluated_on is not None:
        summary["evaluated_on"] = evaluated_on
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.mark.parametrize(
    ("column", "evaluated_on", "named", "label"),
    [
        ("test_mse", "validation", "val_mse", "validation MSE"),  # before val_* columns
        ("test_metric", "validation", "val_mse", "validation MSE"),  # before named metric columns
        ("val_mse", "validation", "val_mse", "validation MSE"),
        ("test_mse", "test", "test_mse", "test MSE"),
        ("test_mse", None, "test_mse", "test MSE"),  # before evaluated_on
    ],
)
def test_old_and_new_folders_read_under_the_right_names(
    tmp_path: Path, column: str, evaluated_on: str | None, named: str, label: str
) -> None:
    run = _old_folder(tmp_path, "r", column, evaluated_on)
    columns = read_metrics(run)
    assert columns[named] == columns[METRIC] == [0.5, 0.25]
    other = "test_mse" if named == "val_mse" else "val_mse"
    assert other not in columns and ("test_metric" not in columns or named == "test_mse")
    fig = metric_figure([load_run(run)])
    assert fig.axes[0].get_ylabel() == label
    plt.close(fig)


def test_validation_and_test_scores_never_share_an_axis(tmp_path: Path) -> None:
    runs = [
        _old_folder(tmp_path, "v", "test_mse", "validation", validation=0.2),
        _old_folder(tmp_path, "t", "test_mse", "test"),
    ]
    fig = metric_figure([load_run(r) for r in runs])
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels == ["validation MSE", "validation MSE", "test MSE", "test MSE"]
    plt.close(fig)
    write_aggregate(runs[:1], tmp_path / "agg")
    assert "| final validation mse |" in (tmp_path / "agg" / "aggregate.md").read_text()
    assert aggregate_runs(runs[1:])["evaluated_on"] == "test"
