"""``sheaf_fmtl.run`` and ``sheaf-fmtl run`` dispatch alike: ``processes = K`` starts K ranks from
Python too (never a silent single-process run recorded as K), or is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.config import ConfigError

KEYS = {"dataset": "synthetic", "clients": 4, "rounds": 3, "eval_every": 1, "checkpoint_every": 0}


@pytest.mark.slow
def test_processes_from_python_start_the_ranks_and_match_one_process(tmp_path) -> None:  # noqa: ANN001
    one = sheaf_fmtl.run(out=tmp_path / "one", **KEYS)
    two = sheaf_fmtl.run(out=tmp_path / "two", processes=2, **KEYS)
    recorded = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two.config.processes == 2 and recorded == two.summary
    assert two.summary["final"] == pytest.approx(one.summary["final"], abs=1e-6)
    assert [r["round"] for r in two.metrics] == [r["round"] for r in one.metrics]
    assert set(two.metrics[-1]) == set(one.metrics[-1])
    for a, b in zip(two.state["thetas"], one.state["thetas"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [({}, "give out='FOLDER'"), ({"out": "x", "callbacks": [object()]}, "callbacks run in this process")],
)
def test_processes_refused_in_one_line_where_they_cannot_run(tmp_path, monkeypatch, extra, fragment) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=fragment):
        sheaf_fmtl.run(processes=2, **KEYS, **extra)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_processes_on_the_command_line_show_rank_zeros_progress(tmp_path, capsys) -> None:  # noqa: ANN001
    from sheaf_fmtl.cli import main

    keys = [f"{k}={v}" for k, v in {**KEYS, "rounds": 10, "processes": 2}.items()]
    assert main(["run", "--set", *keys, "--out", str(tmp_path / "two")]) == 0
    err = capsys.readouterr().err
    rounds = [ln for ln in err.splitlines() if ln.startswith("sheaf-fmtl on synthetic: round")]
    assert [ln.split(",")[0].rsplit(" ", 1)[1] for ln in rounds] == [f"{k}/10" for k in range(1, 11)]
    assert "about" in rounds[0] and "left" in rounds[0] and "left" not in rounds[-1]
