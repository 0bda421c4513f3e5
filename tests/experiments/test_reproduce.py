"""``sheaf-fmtl reproduce``: the paper's experiments as data, cells, reuse, tables, missing data."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sheaf_fmtl.data.base import DatasetError
from sheaf_fmtl.experiments import reproduce as rep
from sheaf_fmtl.experiments.cells import CELL_FILE, cell_config
from sheaf_fmtl.experiments.paper import COMPARISON, EXPERIMENTS, PAPER_CNN_PARAMS, TOPOLOGY
from sheaf_fmtl.federation import count_parameters
from sheaf_fmtl.models import build_model

# Every paper dataset replaced by a tiny generated problem (the experiment's own keys stay).
TINY = {
    "dataset": "synthetic",
    "model": "auto",
    "clients": 6,
    "graph_p": 0.6,
    "data": {"features": 6, "classes": 3},
}
SUBSTITUTE = {d: TINY for d in ("rmnist", "hcifar10", "har", "vehicle", "gleam", "school")}
TWO_ROUNDS = ["rounds=2", "eval_every=1"]


def _reproduce(name: str, out: Path, **kw: object) -> list[Path]:
    args = {
        "quick": True,
        "seeds": 1,
        "overrides": TWO_ROUNDS,
        "substitute": SUBSTITUTE,
        "progress": False,
        "estimate": False,
        "figures": False,
        **kw,
    }
    return rep.reproduce(name, out, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_quick_smoke_run_writes_tables_beside_the_paper(name: str, tmp_path: Path) -> None:
    exp = EXPERIMENTS[name]
    figures = name == "heterogeneous"  # figures take seconds each: drawn (and checked) once
    written = _reproduce(name, tmp_path, estimate=figures, figures=figures, datasets=exp.datasets[:1])
    md, table = tmp_path / f"{name}.md", tmp_path / f"{name}.csv"
    assert md in written and table in written
    lines = md.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| dataset"))
    for col in exp.columns:  # every column of ours has the paper's beside it
        assert header.count("| ours: ") == header.count("| paper: ") == len(exp.columns), col
    body = [line for line in lines if line.startswith("| ") and line != header]
    assert all(line.count("|") == header.count("|") for line in body)
    recs = list(csv.DictReader(open(table)))
    assert len(recs) == len(exp.settings)
    # lam = 10 (topology) fails the start-up stability check at alpha 0.05, and aligned maps and
    # partial personalisation (layers of networks) do not fit the smoke problem's logistic models:
    # visible "refused" rows
    refused = [r for r in recs if "refused: " in r["status"]]
    assert all(r["slug"].endswith("lam10") or r["slug"] in ("sheaf-fmtl-aligned", "partial") for r in refused)
    assert all(r["seeds"] == "1" and r["ours_metric"] != "" for r in recs if r not in refused)
    for (ds, slug), cells in exp.paper.items():  # the paper's numbers appear on their rows
        if ds != exp.datasets[0]:
            continue
        rec = next(r for r in recs if r["dataset"] == ds and r["slug"] == slug)
        assert rec["paper_metric"] == cells.get("metric", "—")
    if figures:
        assert any(p.suffix == ".png" and "metric_vs_rounds" in p.name for p in written)
        assert any(p.suffix == ".png" and p.name.startswith("map_norms") for p in written)


def test_finished_cells_are_reused_and_changed_ones_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = rep.run_cell

    def counting(cell, folder):  # noqa: ANN001, ANN202
        calls.append(f"{cell.dataset}/{cell.setting.slug}/{cell.seed}")
        return real(cell, folder)

    monkeypatch.setattr(rep, "run_cell", counting)
    _reproduce("heterogeneous", tmp_path, seeds=2)
    settings = len(EXPERIMENTS["heterogeneous"].settings)
    assert len(calls) == 2 * settings * 2  # datasets x settings x seeds
    some = next((tmp_path / "cells").rglob("summary.json"))
    stamp = some.stat().st_mtime_ns
    calls.clear()
    _reproduce("heterogeneous", tmp_path, seeds=2)
    assert calls == [] and some.stat().st_mtime_ns == stamp
    (some.parent / CELL_FILE).unlink()  # as if interrupted before it finished: run again
    _reproduce("heterogeneous", tmp_path, seeds=2)
    assert len(calls) == 1
    calls.clear()
    _reproduce("heterogeneous", tmp_path, seeds=2, datasets=["rmnist"], overrides=[*TWO_ROUNDS, "lam=0.5"])
    assert len(calls) == settings * 2  # another config: recomputed


def test_seed_column_is_mean_and_standard_error(tmp_path: Path) -> None:
    _reproduce("heterogeneous", tmp_path, seeds=3, datasets=["rmnist"])
    import json
    import math

    finals = [
        json.loads(p.read_text())["final"]
        for p in sorted((tmp_path / "cells/heterogeneous/rmnist/local").rglob("summary.json"))
    ]
    mean = sum(finals) / 3
    se = math.sqrt(sum((f - mean) ** 2 for f in finals) / 2) / math.sqrt(3)
    rec = next(r for r in csv.DictReader(open(tmp_path / "heterogeneous.csv")) if r["slug"] == "local")
    assert float(rec["ours_metric"]) == pytest.approx(100 * mean)  # percent, as the paper
    assert float(rec["ours_metric_se"]) == pytest.approx(100 * se)
    assert rec["seeds"] == "3"


def test_missing_dataset_gives_the_how_to_obtain_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no fallback data folder from here
    monkeypatch.delenv("SHEAF_FMTL_DATA", raising=False)
    monkeypatch.setattr(rep, "run_cell", lambda cell, folder: {})  # (school's cells: not what is tested)
    _reproduce("curves", tmp_path / "out", datasets=["gleam", "school"], substitute={"school": TINY})
    text = (tmp_path / "out" / "curves.md").read_text()
    assert "data not present: how to obtain it" in text and "sheaf-fmtl data fetch gleam" in text
    recs = list(csv.DictReader(open(tmp_path / "out" / "curves.csv")))
    (rec,) = [r for r in recs if r["dataset"] == "gleam"]
    assert rec["status"].startswith("data not present")
    assert not (tmp_path / "out" / "cells" / "curves" / "gleam").exists()
    with pytest.raises(DatasetError, match="curves: no data for gleam"):  # nothing at all to run
        _reproduce("curves", tmp_path / "none", datasets=["gleam"], substitute={})
    assert not (tmp_path / "none").exists()


def test_unknown_experiment_and_dataset_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="known: comparison"):
        rep.reproduce("nope", tmp_path)
    with pytest.raises(ValueError, match="its datasets: rmnist, hcifar10"):
        _reproduce("comparison", tmp_path, datasets=["vehicle"])


@pytest.mark.parametrize("name", sorted(PAPER_CNN_PARAMS))
def test_cnn_parameter_counts_against_the_paper_table(name: str) -> None:
    mnist, cifar = PAPER_CNN_PARAMS[name]
    assert count_parameters(build_model(name, (1, 28, 28), 10)) == pytest.approx(mnist, rel=0.03)
    # cnn-small: 23K (MNIST) and 28K (CIFAR) are not both reachable with one kernel (models/cnn.py):
    # it matches MNIST and is 16% over on CIFAR.
    rel = 0.17 if name == "cnn-small" else 0.03
    assert count_parameters(build_model(name, (3, 32, 32), 10)) == pytest.approx(cifar, rel=rel)


def test_cell_config_precedence() -> None:
    sheaf = COMPARISON.settings[0]
    cfg = cell_config(COMPARISON, "rmnist", sheaf, 3)
    assert (cfg.lam, cfg.graph_p, cfg.model, cfg.gamma, cfg.seed) == (0.001, 0.15, "cnn", 0.01, 3)
    assert cfg.save_maps is False and cfg.local_epochs == 1
    tuned = [
        {"dataset": "rmnist", "algorithm": "sheaf-fmtl", "alpha": 0.02, "gamma": 0.5, "rounds": 7},
        {"dataset": "hcifar10", "alpha": 0.3},
        {"algorithm": "dfedu", "alpha": 0.4},
    ]
    cfg = cell_config(COMPARISON, "rmnist", sheaf, 1, tuned=tuned, quick=True, overrides=["lam=0.1"])
    assert (cfg.alpha, cfg.gamma, cfg.seed, cfg.lam) == (0.02, 0.01, 1, 0.1)  # the setting's gamma wins
    assert cfg.rounds == 10  # a tuned YAML gives step sizes and regularisation only
    assert cfg.clients == 8 and cfg.local_epochs == 0  # --quick
    lams = {s.overrides["lam"] for s in TOPOLOGY.settings}
    assert lams == {1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0}


def test_paper_numbers_name_real_rows() -> None:
    for exp in EXPERIMENTS.values():
        slugs = [s.slug for s in exp.settings]
        assert len(set(slugs)) == len(slugs), exp.name
        for ds, slug in exp.paper:
            assert ds in exp.datasets and slug in slugs, (exp.name, ds, slug)
    assert COMPARISON.paper[("rmnist", "sheaf-fmtl-g0.01")]["metric"] == "94.3 ± 0.12"
    assert TOPOLOGY.paper[("vehicle", "dfedu-complete-lam10")] == {"metric": "80.40 ± 0.35", "bits": "3555"}


def test_cli_reproduce_and_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from sheaf_fmtl.experiments.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SHEAF_FMTL_DATA", raising=False)
    args = parser.parse_args(
        ["reproduce", "curves", "--quick", "--datasets", "gleam", "--out", "r", "--quiet"]
    )
    with pytest.raises(DatasetError, match="reproduce curves: no data for gleam"):
        args.func(args)
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="no experiment has dataset"):
        rep.reproduce("all", tmp_path / "r", datasets=["nope"])
    _reproduce("heterogeneous", tmp_path / "h", datasets=["rmnist"], seeds=2)
    runs = sorted(str(p.parent) for p in (tmp_path / "h" / "cells").rglob("summary.json"))
    args = parser.parse_args(["table", *runs, "--out", "t", "--name", "het"])
    assert args.func(args) == 0
    recs = list(csv.DictReader(open(tmp_path / "t" / "het.csv")))
    # two seeds of each setting; aligned maps do not fit the smoke problem's logistic models
    assert sorted(r["seeds"] for r in recs) == ["0", "2", "2"]
