"""``table`` and ``plot`` write only where the user asks: ``table`` prints unless given ``--out``
and replaces its files only with ``--overwrite``; ``plot`` of several runs needs ``--out`` (never
the first run's folder). The table's labels name only keys a row's runs read; FLOPs come in a unit
that fits them; a wall-time column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from tests.helpers import folder_snapshot

TINY = ["dataset=synthetic", "clients=4", "rounds=2", "eval_every=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A local run and a Sheaf-FMTL run with its own lam and gamma."""
    root = tmp_path_factory.mktemp("runs")
    out = [root / "local", root / "sheaf"]
    assert main(["run", "--set", *TINY, "algorithm=local", "--out", str(out[0]), "--quiet"]) == 0
    sheaf = ["algorithm=sheaf-fmtl", "maps=redrawn", "lam=0.2", "gamma=0.5"]
    assert main(["run", "--set", *TINY, *sheaf, "--out", str(out[1]), "--quiet"]) == 0
    return out


def test_table_prints_and_writes_nothing_unless_given_out(tmp_path, monkeypatch, capsys, runs) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    before = [set(folder_snapshot(r)) for r in runs]
    assert main(["table", *map(str, runs)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# Runs") and "| synthetic | algorithm=local |" in printed
    assert list(tmp_path.iterdir()) == [] and [set(folder_snapshot(r)) for r in runs] == before


def test_table_replaces_its_files_only_when_asked(tmp_path, capsys, runs) -> None:  # noqa: ANN001
    out = tmp_path / "tables"
    assert main(["table", *map(str, runs), "--out", str(out)]) == 0
    (out / "table.md").write_text("mine")
    assert main(["table", *map(str, runs), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "table.md exists; add --overwrite" in err and (out / "table.md").read_text() == "mine"
    assert main(["table", *map(str, runs), "--out", str(out), "--overwrite"]) == 0
    assert (out / "table.md").read_text().startswith("# Runs")


def test_table_labels_columns_and_units(tmp_path, runs) -> None:  # noqa: ANN001
    assert main(["table", *map(str, runs), "--out", str(tmp_path)]) == 0
    rows = {r["setting"]: r for r in csv.DictReader((tmp_path / "table.csv").open())}
    # lam, gamma and maps differ between the runs; local training reads none of them
    assert set(rows) == {"algorithm=local", "algorithm=sheaf-fmtl, lam=0.2, gamma=0.5, maps=redrawn"}
    md = (tmp_path / "table.md").read_text()
    flops = [json.loads((r / "summary.json").read_text())["flops"] for r in runs]
    unit, per = ("MFLOP", 1e6) if max(flops) >= 1e6 else ("kFLOP", 1e3)  # tiny runs: below 1e9
    assert f"ours: FLOPs ({unit})" in md and "wall time (s)" in md
    for run, row in zip(runs, rows.values(), strict=True):
        summary = json.loads((run / "summary.json").read_text())
        assert float(row["ours_flops"]) == pytest.approx(summary["flops"] / per)
        assert 1 <= float(row["ours_flops"]) < 1000
        assert float(row["ours_time"]) == pytest.approx(summary["wall_seconds"])


@pytest.mark.slow
def test_plot_of_several_runs_needs_out(tmp_path, capsys, runs) -> None:  # noqa: ANN001
    before = [set(folder_snapshot(r)) for r in runs]
    assert main(["plot", *map(str, runs)]) == 2
    assert "give --out DIR" in capsys.readouterr().err
    assert [set(folder_snapshot(r)) for r in runs] == before
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "metric_vs_rounds_and_bits.png").is_file()
    assert [set(folder_snapshot(r)) for r in runs] == before
