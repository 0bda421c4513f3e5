"""What ``load`` / ``export`` read is vouched for by the run's own ``summary.json``: ``best.pt``
(``best``: its round, size and SHA-256, recorded by the run's last part), ``config.yaml`` and
``preprocessing.json`` (``files``); a file copied from another run, a summary and checkpoint swapped
in from another run, a best round left from before a resume without early stopping, a standardisation
that would divide by zero, a malformed ``best.pt`` on resume: each refused in one line, nothing changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.data import preprocessing
from sheaf_fmtl.data.base import DatasetError
from tests.helpers import error_line, folder_snapshot

KEYS = ["dataset=synthetic", "clients=4", "rounds=6", "eval_every=1", "validation=0.3", "batch_size=4"]


def _run(out: Path, *more: str) -> None:
    assert main(["run", "--out", str(out), "--quiet", "--set", *KEYS, *more]) == 0


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    a, b = root / "a", root / "b"
    _run(a, "early_stop_patience=50")
    _run(b, "early_stop_patience=50", "seed=7", "lam=0.5")
    return a, b


def test_the_summary_records_the_best_round_and_the_files_an_export_reads(two_runs):
    a, _ = two_runs
    summary = json.loads((a / "summary.json").read_text())
    assert set(summary["files"]) == {"config.yaml", "preprocessing.json"}
    saved = torch.load(a / "best.pt", weights_only=True)
    assert summary["best"]["round"] == saved["round"] and summary["best"]["value"] == saved["value"]
    assert sheaf_fmtl.load(a, round="best").round == saved["round"]


@pytest.mark.parametrize("swap", [["best.pt"], ["summary.json", "checkpoint.pt"], ["preprocessing.json"]])
def test_a_file_of_another_run_is_never_exported_as_this_runs(two_runs, tmp_path, capsys, swap):
    a, b = two_runs
    run = tmp_path / "a"
    shutil.copytree(a, run)
    for name in swap:
        shutil.copy2(b / name, run / name)
    before = folder_snapshot(run, folders=False)
    rounds = "best" if swap == ["best.pt"] else "final"
    assert main(["export", str(run), "--out", str(tmp_path / "m"), "--round", rounds, "--no-programs"]) == 2
    err = error_line(capsys)
    assert "differs from the size and SHA-256" in err and "not read" in err, err
    assert not (tmp_path / "m").exists() and folder_snapshot(run, folders=False) == before


def test_a_best_round_left_from_before_a_resume_without_early_stopping_is_not_exported(tmp_path, capsys):
    out = tmp_path / "r"
    _run(out, "early_stop_patience=1", "alpha=1e-9", "lam=0", "rounds=12")  # stops early
    assert json.loads((out / "summary.json").read_text())["status"] == "stopped"
    assert main(["run", "--resume", str(out), "--quiet", "--set", "early_stop_patience=0"]) == 0
    assert (out / "best.pt").is_file() and "best" not in json.loads((out / "summary.json").read_text())
    assert main(["export", str(out), "--out", str(tmp_path / "m"), "--round", "best", "--no-programs"]) == 2
    err = error_line(capsys)
    assert "best.pt is not vouched for" in err and "--round final" in err, err
    with pytest.raises(DatasetError, match="not vouched for"):
        sheaf_fmtl.load(out, round="best")


@pytest.mark.parametrize("std", [0.0, -1.0, float("nan"), "1", True, None])
def test_a_standardisation_that_would_divide_by_zero_or_nan_is_refused(tmp_path, std):
    record = {
        "format": 1,
        "task": "regression",
        "num_classes": 1,
        "clients": [{"feature_shape": [2], "standardize": {"mean": [0.0, 0.0], "std": [1.0, std]}}],
    }
    (tmp_path / preprocessing.FILE).write_text(json.dumps(record))
    with pytest.raises(DatasetError, match=r"client 0's standardize std holds .*above 0"):
        preprocessing.read(tmp_path)
    record["clients"][0]["standardize"] = {"mean": [float("inf"), 0.0], "std": [1.0, 1.0]}
    (tmp_path / preprocessing.FILE).write_text(json.dumps(record))
    with pytest.raises(DatasetError, match="standardize mean holds inf"):
        preprocessing.read(tmp_path)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("s") / "r"
    _run(out, "early_stop_patience=1", "alpha=1e-9", "lam=0", "rounds=12")  # stops early, keeps best.pt
    return out


@pytest.mark.parametrize("body", [b"not a checkpoint", b"", "dict", "short", "huge"])
def test_a_malformed_best_round_on_resume_is_one_line_and_changes_nothing(stopped, tmp_path, capsys, body):
    out = tmp_path / "r"
    shutil.copytree(stopped, out)
    if body == "dict":
        torch.save({"round": 2, "value": float("nan"), "thetas": []}, out / "best.pt")
    elif body == "short":
        torch.save({"round": 2, "value": 0.5, "thetas": [torch.zeros(3)]}, out / "best.pt")
        body = (out / "best.pt").read_bytes()[:-40]
    if isinstance(body, bytes):
        (out / "best.pt").write_bytes(body)
    if body == "huge":  # sparse: refused by its size, never read
        with open(out / "best.pt", "r+b") as f:
            f.truncate(8 << 30)
    but = "best.pt" if body == "huge" else ""  # (never read into memory here either)
    before = folder_snapshot(out, folders=False, but=but)
    assert main(["run", "--resume", str(out), "--quiet", "--set", "early_stop_patience=5"]) == 2
    err = error_line(capsys)
    assert "best.pt" in err and "remove it" in err, err
    assert folder_snapshot(out, folders=False, but=but) == before  # summary.json kept
