"""Seed aggregates (metrics/aggregate.py) and ``table`` over run folders (experiments/table.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from sheaf_fmtl.config import RunConfig, save_config
from sheaf_fmtl.experiments.cli import parse_seeds, run_seeds
from sheaf_fmtl.experiments.table import group_runs, render, table_spec
from sheaf_fmtl.metrics.aggregate import aggregate_runs, final_metric, format_pm, seed_stats


def test_standard_error_matches_hand_computation() -> None:
    # values 0.90, 0.92, 0.97: mean 0.93, deviations -0.03, -0.01, 0.04, squares sum 0.0026,
    # sample variance 0.0013, sd 0.0360555, se = sd / sqrt(3) = 0.0208167
    st = seed_stats([0.90, 0.92, 0.97])
    assert st.n == 3
    assert st.mean == pytest.approx(0.93)
    assert st.se == pytest.approx(0.0208167, abs=1e-7)
    assert format_pm(st, 100, ".2f") == "93.00 ± 2.08"


def test_single_seed_and_missing_values() -> None:
    assert seed_stats([0.5]).se is None and format_pm(seed_stats([0.5])) == "0.5000"
    st = seed_stats([1.0, None, float("nan"), 3.0])  # a diverged seed and a missing field dropped
    assert st.n == 2 and st.mean == 2.0 and st.se == pytest.approx(1.0)  # sd sqrt(2), / sqrt(2)
    assert format_pm(seed_stats([])) == "n/a"


def _fake_run(
    folder: Path, seed: int, final: float, *, lam: float = 0.01, column: str = "test_accuracy"
) -> Path:
    folder.mkdir(parents=True)
    save_config(RunConfig(seed=seed, lam=lam), folder / "config.yaml")
    summary = {
        "algorithm": "sheaf-fmtl",
        "dataset": "synthetic-hetero",
        "seed": seed,
        "metric": "accuracy",
        "status": "ok",
        "final": final,
        "transmitted_bits": 8_000_000 * (seed + 1),
        "peak_rss_bytes": 2_000_000,
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "metrics.csv").write_text(f"round,{column}\n0,0.1\n10,{final}\n")
    return folder


def test_final_metric_reads_every_metrics_column(tmp_path: Path) -> None:
    for col in ("test_metric", "test_accuracy", "test_mse"):
        run = _fake_run(tmp_path / col, 0, 0.75, column=col)
        (run / "summary.json").write_text(json.dumps({"status": "ok"}))  # no "final": read the CSV
        assert final_metric(run) == 0.75


def test_table_groups_seeds_and_writes_markdown_and_csv(tmp_path: Path) -> None:
    runs = [_fake_run(tmp_path / f"a{s}", s, v) for s, v in enumerate((0.90, 0.92, 0.97))]
    runs += [_fake_run(tmp_path / "b0", 0, 0.5, lam=1.0)]
    rows = group_runs(runs)
    assert [len(r.runs) for r in rows] == [3, 1]
    assert [r.label for r in rows] == ["lam=0.01", "lam=1.0"]
    md, csv_path = render(rows, table_spec(), tmp_path / "t")
    text = md.read_text()
    assert "0.9300 ± 0.0208" in text and "| paper: test accuracy |" in text
    assert "n/a" in text  # no FLOPs in these summaries
    recs = list(csv.DictReader(open(csv_path)))
    assert float(recs[0]["ours_metric_se"]) == pytest.approx(0.0208167, abs=1e-7)
    assert float(recs[0]["ours_bits"]) == pytest.approx(2.0)  # 1, 2, 3 MB
    assert recs[1]["ours_metric_se"] == "" and recs[0]["paper_metric"] == "—"


def test_table_refuses_a_non_run_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        group_runs([tmp_path])


def test_parse_seeds() -> None:
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("0-4") == [0, 1, 2, 3, 4]
    for bad in ("a", "1,1", "", "-1"):
        with pytest.raises(ValueError):
            parse_seeds(bad)


def test_run_seeds_writes_per_seed_folders_and_aggregate(tmp_path: Path) -> None:
    config = RunConfig(dataset="synthetic", clients=3, rounds=2, eval_every=1, data={"features": 5})
    agg = run_seeds(config, [0, 1], tmp_path, progress=False)
    finals = [json.loads((tmp_path / f"seed{s}" / "summary.json").read_text())["final"] for s in (0, 1)]
    assert agg["seeds"] == [0, 1] and agg["final"]["values"] == finals
    sd = math.sqrt(sum((f - sum(finals) / 2) ** 2 for f in finals))  # n - 1 = 1
    assert agg["final"]["se"] == pytest.approx(sd / math.sqrt(2))
    assert json.loads((tmp_path / "aggregate.json").read_text())["final"]["n"] == 2
    assert "final test accuracy" in (tmp_path / "aggregate.md").read_text()
    assert yaml.safe_load((tmp_path / "seed1" / "config.yaml").read_text())["seed"] == 1
    stamp = (tmp_path / "seed0" / "summary.json").stat().st_mtime_ns
    run_seeds(config, [0, 1], tmp_path, progress=False)  # finished seeds are reused
    assert (tmp_path / "seed0" / "summary.json").stat().st_mtime_ns == stamp
    assert aggregate_runs([tmp_path / "seed0"])["final"].n == 1
