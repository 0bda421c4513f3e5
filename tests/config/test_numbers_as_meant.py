"""Numbers are read as a person reads them, or refused: YAML 1.1's octal (``seed: 010`` is 8) and
base-60 (``1:30`` is 90) forms are refused in one line naming the value, what YAML would make of it
and what to write instead, in a config file, a ``--set`` value and a ``--grid`` list alike; plain,
hexadecimal, binary and underscored numbers and quoted text read as before. ``table`` over runs of
different metrics never prints an MSE under an accuracy header."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig, load_config, parse_yaml, save_config
from sheaf_fmtl.experiments.table import group_runs, render, table_spec

AMBIGUOUS = {
    "010": "octal number 8; write 10",
    "-010": "octal number -8; write -10",
    "+0_17": "octal number 15; write 17",
    "00": "octal number 0; write 0",
    "1:30": "base-60 number (90); write 90",
    "-1:00:01": "base-60 number (-3601); write -3601",
    "1:30.5": "base-60 number (90.5); write 90.5",
}


@pytest.mark.parametrize("text, why", list(AMBIGUOUS.items()))
def test_a_yaml_1_1_number_is_refused_everywhere(tmp_path, capsys, text, why):
    path = tmp_path / "c.yaml"
    path.write_text(f"rounds: 2\nseed: {text}\n")
    with pytest.raises(
        ConfigError,
        match=re.escape(f"config file {path}, line 2: ")
        + rf".*{re.escape(why)}.*'{re.escape(text)}' for text",
    ):
        load_config(path)
    assert main(["run", "--set", f"seed={text}", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"override 'seed={text}'" in err and why in err, err
    grid = ["sweep", "--grid", f"seed=1,{text}", "--out", str(tmp_path / "s")]
    assert main(grid) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "text, value",
    [
        ("10", 10),
        ("0", 0),
        ("0x1F", 31),
        ("0b101", 5),
        ("1_000", 1000),
        ("'010'", "010"),
        ("1e-3", 0.001),
        ("010.5", 10.5),
        ("'1:30'", "1:30"),
        ("-7", -7),
    ],
)
def test_plain_numbers_and_quoted_text_read_as_written(text, value):
    assert parse_yaml(f"x: {text}", "test") == {"x": value}


def test_a_saved_config_reads_back_the_same(tmp_path):
    config = RunConfig(seed=10, rounds=90)
    save_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config


def _run(folder: Path, metric: str, final: float, evaluated_on: str = "test") -> Path:
    folder.mkdir(parents=True)
    dataset = "synthetic" if metric == "accuracy" else "school"
    save_config(RunConfig(dataset=dataset), folder / "config.yaml")
    summary = {"dataset": dataset, "seed": 0, "metric": metric, "status": "ok", "final": final}
    summary["evaluated_on"] = evaluated_on
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metrics.csv").write_text(f"round,test_{metric}\n0,{final}\n")
    return folder


def test_a_table_of_different_metrics_gives_each_its_own_column(tmp_path):
    runs = [_run(tmp_path / "acc", "accuracy", 0.9), _run(tmp_path / "mse", "mse", 0.0123)]
    md, csv_path = render(group_runs(runs), table_spec(), tmp_path / "t")
    text = md.read_text()
    assert "| ours: test accuracy | paper: test accuracy | ours: test MSE | paper: test MSE |" in text
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()}
    assert "| 0.9000 ± " not in text and " 0.9000 | — |  |  |" in lines["synthetic"], lines["synthetic"]
    assert " |  |  | 0.0123 | — |" in lines["school"], lines["school"]
    recs = {r["dataset"]: r for r in csv.DictReader(open(csv_path))}
    assert recs["synthetic"]["metric"] == "accuracy" and recs["school"]["metric"] == "mse"
    assert float(recs["school"]["ours_metric_test_mse"]) == 0.0123
    assert recs["school"]["ours_metric_test_accuracy"] == ""


def test_a_table_names_a_validation_score_and_keeps_it_apart(tmp_path):
    """A run scored on a validation split (here an older folder, whose metrics.csv said test_*) is
    headed as such, and never shares a column with test scores of the same metric."""
    runs = [_run(tmp_path / "v", "mse", 0.25, "validation"), _run(tmp_path / "t", "mse", 0.5)]
    save_config(RunConfig(dataset="school", validation=0.2), runs[0] / "config.yaml")
    text = render(group_runs(runs), table_spec(), tmp_path / "t")[0].read_text()
    assert "| ours: validation MSE | paper: validation MSE | ours: test MSE | paper: test MSE |" in text
    lines = [line for line in text.splitlines() if line.startswith("| school")]
    assert any(" 0.2500 | — |  |  |" in line for line in lines), lines
    assert any(" |  |  | 0.5000 | — |" in line for line in lines), lines


def test_a_table_of_one_metric_keeps_its_header(tmp_path):
    runs = [_run(tmp_path / "a", "mse", 0.5)]
    md, _ = render(group_runs(runs), table_spec(), tmp_path / "t")
    assert "| ours: test MSE |" in md.read_text() and "mse: 0.5" not in md.read_text()
