"""SIGINT / SIGTERM in the commands that run several runs (``run --seeds``, ``sweep``,
``reproduce``): the first signal stops the current run after its round and then the command (exit
status 130 / 143, one line naming what to do), what finished is recorded, and the same command run
again continues where it stopped (the stopped run resumed from its checkpoint). A second signal
ends at once and still leaves the run's ``summary.json``."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.engine import simulate
from sheaf_fmtl.runtime.run.stopping.interrupt import StopRequest
from tests.helpers import one_line, signalling

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")
TINY = ["--set", "rounds=4", "eval_every=2", "clients=4", "--quiet"]


@pytest.fixture
def signal_at(monkeypatch):
    """``signal_at(n, sig, times=1)``: the n-th round step (over the whole command) sends ``sig``
    to this process ``times`` times; ``signal_at(0)`` restores the real step."""
    step = simulate.Simulation.step

    def arm(n: int, sig: int = signal.SIGTERM, times: int = 1) -> None:
        monkeypatch.setattr(simulate.Simulation, "step", signalling(step, n, sig, times) if n else step)

    return arm


def _status(folder: Path) -> str | None:
    path = folder / "summary.json"
    return json.loads(path.read_text()).get("status") if path.is_file() else None


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_run_seeds_stops_at_the_first_signal_and_a_rerun_continues(tmp_path, capsys, signal_at, sig, code):
    out = tmp_path / "seeds"
    argv = ["run", *TINY, "--seeds", "0-2", "--out", str(out)]
    signal_at(6, sig)  # seed 0: rounds 1-4; seed 1: stopped after its round 2
    assert main(argv) == code
    assert "Traceback" not in one_line(
        capsys.readouterr().err, f"run --seeds stopped by {signal.Signals(sig).name}"
    )
    assert [_status(out / f"seed{s}") for s in range(3)] == ["ok", "interrupted", None]
    assert json.loads((out / "aggregate.json").read_text())["seeds"] == [0]  # what finished
    signal_at(0)
    assert main(argv) == 0
    assert [_status(out / f"seed{s}") for s in range(3)] == ["ok", "ok", "ok"]
    resumed = json.loads((out / "seed1" / "summary.json").read_text())
    assert resumed["resumed_from_round"] == 2  # continued, not started again
    assert json.loads((out / "aggregate.json").read_text())["seeds"] == [0, 1, 2]


def test_sweep_stops_at_the_first_signal_and_a_rerun_continues(tmp_path, capsys, signal_at):
    out = tmp_path / "sweep"
    argv = ["sweep", *TINY, "--grid", "lam=0.01,0.1,0.3", "--out", str(out)]
    signal_at(5)  # cell 1 done, cell 2 stopped after round 1, cell 3 never started
    assert main(argv) == 143
    assert "Traceback" not in one_line(capsys.readouterr().err, "sweep stopped by SIGTERM")
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert [r["lam"] for r in rows] == ["0.01"] and not (out / "best.yaml").exists()
    assert len(list((out / "cells").iterdir())) == 2
    signal_at(0)
    assert main(argv) == 0
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert sorted(r["lam"] for r in rows) == ["0.01", "0.1", "0.3"] and (out / "best.yaml").is_file()


def test_reproduce_stops_at_the_first_signal_and_a_rerun_continues(tmp_path, signal_at):
    from tests.experiments.test_reproduce import _reproduce

    signal_at(3)  # two rounds a cell: the first cell finishes, the second is stopped after round 1
    with StopRequest() as stop:  # as `sheaf-fmtl reproduce` holds one around the command
        _reproduce("heterogeneous", tmp_path, datasets=["rmnist"])
    assert stop.signum == signal.SIGTERM
    cells = sorted(tmp_path.glob("cells/heterogeneous/rmnist/*/seed0"), key=lambda p: p.stat().st_mtime)
    statuses = [_status(p) for p in cells]  # (a refused cell runs no round)
    assert statuses[-1] == "interrupted" and set(statuses[:-1]) <= {"ok", "refused"} and "ok" in statuses
    signal_at(0)
    _reproduce("heterogeneous", tmp_path, datasets=["rmnist"])
    assert [_status(p) for p in cells] == [s if s != "interrupted" else "ok" for s in statuses]
    assert json.loads((cells[-1] / "summary.json").read_text())["resumed_from_round"] == 1


def test_a_signal_between_runs_stops_before_the_next(tmp_path, capsys, signal_at):
    """A signal caught by the command's own request (not during a run) starts no further run."""
    out = tmp_path / "seeds"
    with StopRequest():
        os.kill(os.getpid(), signal.SIGINT)
        assert main(["run", *TINY, "--seeds", "0,1", "--out", str(out)]) == 130
    assert not (out / "seed0").exists()


def test_a_second_signal_ends_at_once_and_leaves_a_summary(tmp_path, capsys, signal_at):
    out = tmp_path / "run"
    signal_at(3, times=2)
    assert main(["run", *TINY, "--out", str(out)]) == 143
    assert "Traceback" not in one_line(capsys.readouterr().err, "stopped at once by a second SIGTERM")
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["signal"] == "SIGTERM" and s["algorithm"] == "sheaf-fmtl"
    signal_at(0)
    assert main(["run", "--resume", str(out), "--quiet"]) == 0  # it can still be continued


def test_a_second_signal_in_a_seed_leaves_its_summary(tmp_path, capsys, signal_at):
    out = tmp_path / "seeds"
    signal_at(2, sig=signal.SIGINT, times=2)
    assert main(["run", *TINY, "--seeds", "0,1", "--out", str(out)]) == 130
    assert _status(out / "seed0") == "interrupted" and not (out / "seed1").exists()


@pytest.mark.parametrize(
    "keys", [["algorithm=dfedu"], ["maps=redrawn"], ["algorithm=ditto"], ["maps=redrawn", "estimates=true"]]
)
def test_a_stopped_seed_with_the_rule_lam_is_continued_not_started_again(tmp_path, signal_at, keys):
    """``lam`` left out: the stopped run recorded the lam its rule chose, and the rerun continues it."""
    out = tmp_path / "seeds"
    argv = ["run", *TINY[:-1], *keys, "data.homogeneous=true", "--quiet", "--seeds", "0,1", "--out", str(out)]
    signal_at(6)  # seed 1 stopped after its round 2
    assert main(argv) == 143
    signal_at(0)
    assert main(argv) == 0
    resumed = json.loads((out / "seed1" / "summary.json").read_text())
    assert resumed.get("resumed_from_round") == 2, resumed.get("lam_rule")
