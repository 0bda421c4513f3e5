"""Every registered algorithm on one process and on two (clients 0-3 and 4-6, so neither rank's
first client is the other's): the same transmitted bits and fault counts exactly, the same final
metrics, per-client metrics, metrics rows and models within float32 rounding (:data:`RTOL`,
:data:`ATOL`). ``summary.json`` records the layout that ran; early stopping keeps the same best
evaluation.

The ranks are forked from this process and meet through a file (:func:`_in_ranks`, as
``processes=2`` ranks do); the commands that make several runs start real ranks
(``run --seeds``, ``sweep``, ``demo``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.config.registry import algorithm_names
from sheaf_fmtl.runtime.engine.simulate import DivergenceError
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import latest_checkpoint
from sheaf_fmtl.runtime.run.launching import launch
from sheaf_fmtl.runtime.run.loop import RunOutcome, execute

from .run.checkpoints.test_distributed_checkpoint import _in_ranks

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

TINY: dict[str, Any] = {
    "dataset": "synthetic",
    "clients": 7,
    "rounds": 4,
    "eval_every": 2,
    "graph_p": 0.5,
    "batch_size": 4,
    "data": {"min_samples": 20, "max_samples": 40},
}
#: What an algorithm needs beyond :data:`TINY` (``partial``: a model with a body and a head;
#: Sheaf-FMTL: models of different sizes, so its maps relate different coordinates).
KEYS: dict[str, dict[str, Any]] = {
    "partial": {"model": "tests._baselines_problems:mlp"},
    "sheaf-fmtl": {"dataset": "synthetic-hetero"},
}
#: Why not bit for bit: a rank pads a cohort's samples to its own largest client, so a sum over a
#: client's zero-padded samples is rounded in another order than in one process, and the server
#: baselines all-reduce each rank's partial sum of the models. Both are float32 roundings (eps =
#: 1.2e-7) of parameters of size about 1, a few of them over the rounds run here (the largest
#: difference seen is 7.5e-8); many runs here happen to agree bit for bit, none is guaranteed to.
RTOL, ATOL = 1e-6, 1e-6


def _config(algorithm: str, **extra: Any) -> RunConfig:  # noqa: ANN401
    return RunConfig(**{**TINY, "algorithm": algorithm, **KEYS.get(algorithm, {}), **extra})


def _on_two(config: RunConfig, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config`` on 2 forked ranks into ``out``: its ``summary.json`` and ``checkpoint.pt``."""
    two = config.replace(processes=2)
    _in_ranks(2, lambda rank: launch.run_rank(two, out, progress=False, overwrite=False))
    summary = json.loads((out / "summary.json").read_text())
    return summary, torch.load(out / "checkpoint.pt", weights_only=True)


def _assert_same(one: RunOutcome, summary: dict[str, Any], final: dict[str, Any], out: Path) -> None:
    tol = {"rtol": RTOL, "atol": ATOL}
    assert summary["transmitted_bits"] == one.summary["transmitted_bits"]
    for key in ("dropped_messages", "rejected_messages", "num_edges", "model_dims"):
        assert summary[key] == one.summary[key], key
    for key in ("final", "per_client"):
        torch.testing.assert_close(torch.tensor(summary[key]), torch.tensor(one.summary[key]), **tol)
    for a, b in zip(one.final["thetas"], final["thetas"], strict=True):
        torch.testing.assert_close(b, a, **tol)
    lines = (out / "metrics.csv").read_text().splitlines()
    columns = lines[0].split(",")
    assert len(lines) - 1 == len(one.rows)
    assert columns == list(one.rows[0])
    for row, line in zip(one.rows, lines[1:], strict=True):
        for column, cell in zip(columns, line.split(","), strict=True):
            if column == "wall_seconds" or row[column] is None:
                continue
            if isinstance(row[column], int):  # round, bits, fault counts, clients present
                assert int(cell) == row[column], column
            else:  # the metric, train loss, objective and coupling energy
                assert float(cell) == pytest.approx(row[column], rel=RTOL, abs=ATOL), column


def _layout_matches(algorithm: str, tmp_path: Path) -> None:
    config = _config(algorithm)
    one = execute(config, None)
    summary, final = _on_two(config, tmp_path / "two")
    assert (one.summary["processes"], one.summary["clients_per_process"]) == (1, [7])
    assert (summary["processes"], summary["clients_per_process"]) == (2, [4, 3])  # the layout that ran
    _assert_same(one, summary, final, tmp_path / "two")


@pytest.mark.parametrize("algorithm", algorithm_names())  # forked ranks: well under a second each
def test_every_algorithm_on_two_processes_gives_one_process_numbers(algorithm: str, tmp_path: Path) -> None:
    _layout_matches(algorithm, tmp_path)


def test_early_stopping_on_two_processes_keeps_one_process_best(tmp_path: Path) -> None:
    """``best.pt`` holds every client's models on two processes too (rank 0 gathers them when the
    validation metric improves): the same round, value and models, and ``summary.json`` records it."""
    keys = {"eval_every": 1, "rounds": 10, "validation": 0.3, "early_stop_patience": 1}
    config = _config("dfedu", **keys)
    execute(config, tmp_path / "one")
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    summary, _ = _on_two(config, tmp_path / "two")
    assert one["status"] == summary["status"] == "stopped"  # (patience ran out: the case of interest)
    kept = [torch.load(tmp_path / k / "best.pt", weights_only=True) for k in ("one", "two")]
    assert kept[0]["round"] == kept[1]["round"] == one["best_round"] == summary["best_round"]
    assert kept[0]["value"] == pytest.approx(kept[1]["value"], rel=RTOL)
    for a, b in zip(*(k["thetas"] for k in kept), strict=True):
        torch.testing.assert_close(b, a, rtol=RTOL, atol=ATOL)
    assert summary["best"]["round"] == one["best"]["round"] and summary["best"]["bytes"] > 0
    assert summary["best_test_accuracy"] == pytest.approx(one["best_test_accuracy"], rel=RTOL)


SEED_KEYS = ["dataset=synthetic", "clients=5", "rounds=3", "eval_every=3", "processes=2"]


def test_run_seeds_starts_the_ranks_of_processes_2(tmp_path: Path) -> None:
    """``run --seeds`` with ``processes=2``: each seed runs on 2 ranks (``summary.json`` records them),
    to the one-process run's numbers."""
    out = tmp_path / "seeds"
    assert main(["run", "--quiet", "--seeds", "4", "--out", str(out), "--set", *SEED_KEYS]) == 0
    summary = json.loads((out / "seed4" / "summary.json").read_text())
    assert (summary["processes"], summary["clients_per_process"]) == (2, [3, 2])
    one = execute(RunConfig(dataset="synthetic", clients=5, rounds=3, eval_every=3, seed=4), None)
    assert summary["transmitted_bits"] == one.summary["transmitted_bits"]
    assert summary["final"] == pytest.approx(one.summary["final"], rel=RTOL)


@pytest.mark.slow  # (each a fresh pair of interpreters per run)
@pytest.mark.parametrize(
    "command",
    [
        ["sweep", "--grid", "lam=0.01,0.1", "--set", *SEED_KEYS, "algorithm=dfedu"],
        ["demo", "--set", *SEED_KEYS, "dataset=synthetic-hetero"],
    ],
    ids=["sweep", "demo"],
)
def test_commands_of_several_runs_start_the_ranks_of_each(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([command[0], "--quiet", "--out", str(out), *command[1:]]) == 0
    summaries = [json.loads(p.read_text()) for p in out.rglob("summary.json")]
    assert len(summaries) >= 2
    assert all((s["processes"], s["clients_per_process"]) == (2, [3, 2]) for s in summaries)


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--seeds", "0,1", "--set", *SEED_KEYS],
        ["sweep", "--grid", "lam=0.01,0.1", "--set", *SEED_KEYS],
        ["demo", "--set", *SEED_KEYS],
    ],
    ids=["seeds", "sweep", "demo"],
)
def test_commands_of_several_runs_refused_as_a_rank_of_torchrun(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under torchrun every rank would make every run: refused in one line, nothing written."""
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for key, value in torchrun.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "out"
    assert main([command[0], "--quiet", "--out", str(out), *command[1:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "start them without torchrun" in err[0], err
    assert not out.exists()


def test_a_run_diverging_on_two_processes_raises_what_one_process_raises(tmp_path: Path) -> None:
    """The ranks' divergence is the one-process DivergenceError, with the summary's message."""
    keys = {"dataset": "synthetic", "clients": 5, "rounds": 10, "eval_every": 1, "alpha": 1e4}
    keys.update(algorithm="sheaf-fmtl", maps="learned", local_epochs=0, stability_check=False)
    with pytest.raises(DivergenceError) as one:
        sheaf_fmtl.run(out=tmp_path / "one", **keys)
    with pytest.raises(DivergenceError) as two:
        sheaf_fmtl.run(out=tmp_path / "two", processes=2, **keys)
    assert str(two.value) == str(one.value)
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["status"] == "diverged"


@pytest.mark.slow  # two commands, each starting 2 fresh interpreters
def test_run_seeds_of_processes_2_stopped_by_sigterm_and_continued(tmp_path: Path) -> None:
    """SIGTERM to ``run --seeds`` of ``processes=2``: its ranks stop with a checkpoint and the command
    with 143 (the signal forwarded to them is the command's too); the same command again resumes the
    seed over 2 processes."""
    out = tmp_path / "seeds"
    pairs = ["dataset=synthetic", "clients=6", "rounds=400", "eval_every=10", "processes=2", "lam=0.1"]
    argv = ["run", "--quiet", "--seeds", "0", "--out", str(out), "--set", *pairs, "algorithm=dfedu"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    parent = subprocess.Popen(
        [sys.executable, "-m", "sheaf_fmtl", *argv], stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 120
    while latest_checkpoint(out / "seed0") is None:
        assert time.monotonic() < deadline and parent.poll() is None, parent.communicate()
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 143, err
    stopped = json.loads((out / "seed0" / "summary.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["processes"] == 2
    assert main(argv) == 0
    summary = json.loads((out / "seed0" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["resumed_from_round"] == stopped["rounds_done"]
    assert (summary["processes"], summary["clients_per_process"]) == (2, [3, 3])
