"""``sheaf-fmtl bench`` end to end (smoke settings; ``--quick`` is marked slow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sheaf_fmtl.bench.harness import linear_fit, run_bench
from sheaf_fmtl.cli import main

SUMMARY = re.compile(r"^(\S+): floor ratio [\d.]+, speed-up [\d.]+, memory ratio [\d.]+$", re.M)


def test_linear_fit() -> None:
    fit = linear_fit([1, 2, 3, 4], [3, 5, 7, 9])
    assert (
        fit["slope"] == pytest.approx(2)
        and fit["intercept"] == pytest.approx(1)
        and fit["r2"] == pytest.approx(1)
    )


def test_bench_smoke_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--smoke", "--threads", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert set(SUMMARY.findall(out)) == {"small-smoke", "cnn-smoke"}
    assert (
        "loop reference was timed on" in out
    )  # the cnn setting times the reference on a subset, and says so
    assert "cohort:" in out and "copy bandwidth" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert (tmp_path / "scaling.png").stat().st_size > 0
    for r in data["settings"].values():
        assert r["s_per_round"] > 0 and r["bytes"]["maps"] > 0 and r["peak_rss"] > r["rss_after_imports"]
        assert r["summary"]["floor_ratio"] > 0 and r["reference"]["s_per_round"] > 0
    assert data["kernel"]["kernel_sha256"]
    assert data["cohort"]["max_rel_diff"] < 1e-2


@pytest.mark.slow
def test_bench_quick(tmp_path: Path) -> None:
    results = run_bench(quick=True, out=tmp_path)
    assert set(SUMMARY.findall(results["report"])) == {"small", "paper-quick"}
