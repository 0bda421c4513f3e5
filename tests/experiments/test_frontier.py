"""``reproduce frontier``: the Pareto front by hand, and a quick frontier on a small generated
problem (strengths tuned on validation, cells reused, table and figure written)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sheaf_fmtl.experiments import frontier as fr
from sheaf_fmtl.experiments.frontier_report import pareto


def _row(problem: str, bits: float, mean: float, higher: bool = True) -> dict[str, object]:
    return {"problem": problem, "total_bits": bits, "mean": mean, "higher": higher}


def test_pareto_front_by_hand() -> None:
    rows = [
        _row("a", 100, 0.8),
        _row("a", 10, 0.7),
        _row("a", 50, 0.6),  # dominated by (10, 0.7)
        _row("a", 0, 0.5),  # sends nothing: never on the front
        _row("b", 10, 120.0, higher=False),
        _row("b", 20, 110.0, higher=False),
        _row("b", 30, 130.0, higher=False),  # dominated: more bits, higher MSE
    ]
    assert pareto(rows) == [True, True, False, False, True, True, False]


def test_quick_frontier_on_a_small_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = {"dataset": "synthetic", "clients": 6, "rounds": 4, "eval_every": 2, "graph_p": 0.6}
    monkeypatch.setattr(fr, "PROBLEMS", {"tiny": (small, "tiny")})
    keep = ("local", "dfedu", "top-k", "redrawn")
    monkeypatch.setattr(fr, "METHODS", tuple(m for m in fr.METHODS if m.slug in keep))
    written = fr.frontier(tmp_path, quick=True, progress=False)
    assert {p.name for p in written} >= {"frontier.csv", "frontier.md", "frontier.png"}
    rows = list(csv.DictReader((tmp_path / "frontier.csv").open()))
    assert [r["method"] for r in rows][:2] == ["local training", "dFedU (whole models)"]
    top = [r for r in rows if r["method"].startswith("dFedU + top-k")]
    assert [r["level"] for r in top] == ["compression=0.1", "compression=0.01"]
    for r in top:  # measured bits equal the formula's, and fewer than whole models
        assert float(r["bits_per_round"]) == float(r["bits_per_round_analytic"])
    assert float(top[1]["total_bits"]) < float(top[0]["total_bits"]) < float(rows[1]["total_bits"])
    assert "lam=" in rows[1]["strength"]
    assert any(r["pareto"] == "True" for r in rows)
    dfedu = rows[1]  # its own target (final less half a point) is reached by its last evaluation
    assert dfedu["reached"] == "1/1" and float(dfedu["fewer_bits_than_dfedu"]) == 1.0
    assert 0 < float(dfedu["bits_to_target"]) <= float(dfedu["total_bits"])
    assert len({r["target"] for r in rows}) == 1
    tuned = sorted(p.name for p in (tmp_path / "cells" / "tiny" / "top-k-0.1").iterdir())
    assert tuned == ["seed0", "tune0", "tune1"]
    before = (tmp_path / "cells" / "tiny" / "dfedu" / "seed0" / "summary.json").stat().st_mtime_ns
    fr.frontier(tmp_path, quick=True, progress=False)  # every cell reused
    assert (tmp_path / "cells" / "tiny" / "dfedu" / "seed0" / "summary.json").stat().st_mtime_ns == before


def test_unknown_problem_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allowed"):
        fr.frontier(tmp_path, problems=["nope"], progress=False)


def test_a_folder_of_yours_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    from sheaf_fmtl.runtime.run.folder.folderlock import FolderError

    (tmp_path / "frontier.md").write_text("my notes\n")
    with pytest.raises(FolderError, match="not written by sheaf-fmtl"):
        fr.frontier(tmp_path, problems=["school"], quick=True, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["frontier.md"]
    assert (tmp_path / "frontier.md").read_text() == "my notes\n"


def test_a_cell_from_before_a_new_key_is_still_finished(tmp_path):
    """A key the library gained since a cell ran (absent from its ``cell.json``) counts as the same
    run when the config leaves it at its default, and not otherwise."""
    import json

    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.experiments.cells import CELL_FILE, _key, finished

    config = RunConfig(dataset="synthetic", rounds=2)
    older = {k: v for k, v in json.loads(json.dumps(_key(config))).items() if k != "graph_degree"}
    (tmp_path / "summary.json").write_text(json.dumps({"status": "ok", "final": 0.5}))
    (tmp_path / CELL_FILE).write_text(json.dumps({"config": older}))
    assert finished(tmp_path, config) is not None
    assert finished(tmp_path, config.replace(graph_degree=4.0)) is None
    assert finished(tmp_path, config.replace(rounds=3)) is None


def test_a_budgeted_sheaf_level_tunes_its_rule_and_multiples_of_the_lam_it_chose() -> None:
    from sheaf_fmtl.experiments import frontier as fr

    method = next(m for m in fr.METHODS if m.slug == "redrawn-links")
    grid = fr.strength_grid(method, 0.35, quick=False)
    assert grid[0] == {"lam": None} and [g["lam_times"] for g in grid[1:]] == list(fr.RULE_TIMES)
    assert fr._relative(grid[1], 4.0) == {"lam": 1.0}
    assert fr._relative(grid[2], 4.0) == {"lam": 2.0}
    assert fr._relative(grid[1], None) is None  # the rule's run refused: nothing to scale
    assert fr._relative({"lam": 0.3}, None) == {"lam": 0.3}
    assert fr.strength_grid(method, 0.35, quick=True) == [{"lam": None}]
    rival = next(m for m in fr.METHODS if m.slug == "top-k-links")
    assert {"lam": None} in fr.strength_grid(rival, None, quick=False)  # dFedU's rule, pull 0.1 / b
