"""A new user's loop with the defaults: runs over algorithms with common keys, then ``table``,
``plot``, ``export`` and ``load``; everything lands in the folders they named, nothing else in the
working folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main

ALGORITHMS = ("local", "dfedu", "sheaf-fmtl")


def test_run_table_plot_export_load(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    common = ["dataset=synthetic-clusters", "data.homogeneous=true", "gamma=0.1", "clients=4", "rounds=2"]
    for a in ALGORITHMS:
        assert main(["run", "--set", *common, f"algorithm={a}", "--out", f"runs/{a}", "--quiet"]) == 0
    runs = sorted(str(p) for p in Path("runs").iterdir())
    assert main(["table", *runs]) == 0
    assert main(["table", *runs, "--out", "tables"]) == 0
    assert main(["plot", *runs, "--out", "figs"]) == 0
    assert main(["export", "runs/sheaf-fmtl", "--out", "models"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figs", "models", "runs", "tables"]
    assert sorted(p.name for p in Path("runs").iterdir()) == sorted(ALGORITHMS)
    assert {"table.md", "table.csv"} == {p.name for p in Path("tables").iterdir()}
    assert (Path("figs") / "metric_vs_rounds_and_bits.png").is_file()
    record = json.loads((Path("models") / "preprocessing.json").read_text())
    program = torch.export.load(Path("models") / record["clients"][0]["program"]).module()
    x = torch.randn(4, *record["clients"][0]["feature_shape"])
    trained = sheaf_fmtl.load("runs/sheaf-fmtl")
    assert torch.allclose(program(x), trained.client(0)(x).detach(), atol=1e-6)
