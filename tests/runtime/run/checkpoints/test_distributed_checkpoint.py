"""Checkpoints across processes: a 2-process run stopped by a signal and resumed over 2 processes
ends with exactly the uninterrupted 2-process run's summary numbers, metrics rows and thetas (bits
equal); a checkpoint with a shard missing is ignored; another process count is refused; the server
baselines' ``drop_prob`` across processes matches one process.

The fast tests fork the ranks from this process (``fork``: no fresh interpreter importing torch),
each joining a Gloo group through a file on the loopback as ``processes=K`` ranks do; the slow one
drives the real command line (SIGTERM to ``sheaf-fmtl run --set processes=2``, then ``run --resume``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.runtime.engine import simulate
from sheaf_fmtl.runtime.run.checkpoints.checkpoint import CHECKPOINTS, MANIFEST, round_dir, shard_name
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import (
    CheckpointError,
    latest_checkpoint,
    read_manifest,
)
from sheaf_fmtl.runtime.run.launching import launch
from sheaf_fmtl.runtime.run.launching.rank import RankLostError
from sheaf_fmtl.runtime.run.launching.rankenv import STORE_FILE
from sheaf_fmtl.runtime.run.launching.resume import resume
from sheaf_fmtl.runtime.run.launching.spawn import _loopback
from sheaf_fmtl.runtime.run.loop import execute

from .test_checkpoint import _assert_same_run

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

TINY = {
    "dataset": "synthetic-hetero",
    "clients": 6,
    "rounds": 8,
    "eval_every": 2,
    "graph_p": 0.5,
    "batch_size": 4,
    "stability_check": False,
    "map_defer": 3,
    "data": {"min_samples": 20, "max_samples": 40},
}


def _in_ranks(
    world: int, body: Callable[[int], None], timeout: float = 60, codes: list[int] | None = None
) -> None:
    """Run ``body(rank)`` in ``world`` forked processes that form a Gloo group (as ``processes=K``
    ranks: a file rendezvous, the loopback); fails unless every rank exits with ``codes`` (0)."""
    store = Path(tempfile.mkdtemp(prefix="sheaf-test-ranks-")) / "rendezvous"

    def child(rank: int) -> None:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        os.environ.update({STORE_FILE: str(store), "GLOO_SOCKET_IFNAME": _loopback()})
        torch.set_num_threads(1)
        body(rank)

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=child, args=(r,)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    shutil.rmtree(store.parent, ignore_errors=True)
    assert [p.exitcode for p in procs] == (codes or [0] * world)


def _stop_after(at: int) -> None:
    """Make this process's runs SIGTERM themselves after round ``at`` (one rank only: the group
    must agree to stop after the same round)."""
    step = simulate.Simulation.step

    def step_then_signal(self: simulate.Simulation[Any]) -> None:
        step(self)
        if self.transport.faults.round == at:
            os.kill(os.getpid(), signal.SIGTERM)

    simulate.Simulation.step = step_then_signal  # type: ignore[method-assign]  # in a forked rank only


@pytest.mark.filterwarnings("ignore:.*the later one of round 6 was cut short:UserWarning")  # (provoked below)
def test_two_process_run_stopped_and_resumed_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    config = RunConfig(**{**TINY, "algorithm": "sheaf-fmtl", "processes": 2})
    full, part = tmp_path / "full", tmp_path / "part"

    def uninterrupted(rank: int) -> None:
        launch.run_rank(config, full, progress=False, overwrite=False)

    def stopped(rank: int) -> None:
        if rank == 1:  # the signal reaches rank 1 only; rank 0 adopts it after the same round
            _stop_after(5)
        launch.run_rank(config, part, progress=False, overwrite=False)

    _in_ranks(2, uninterrupted)
    _in_ranks(2, stopped)
    summary = json.loads((part / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_done"] == 5
    folder = latest_checkpoint(part)
    assert folder == round_dir(part, 5)  # the periodic ones (rounds 2, 4) were completed, then removed
    manifest = read_manifest(folder)
    assert manifest is not None and manifest["shards"] == [shard_name(0), shard_name(1)]
    assert [r["round"] for r in manifest["rows"]] == [0, 2, 4]
    # a later checkpoint with only rank 0's shard (no manifest: cut short) is passed over; one
    # whose manifest names a shard that is missing is refused until its folder is removed
    cut = round_dir(part, 6)
    cut.mkdir()
    shutil.copy(folder / shard_name(0), cut / shard_name(0))
    assert latest_checkpoint(part) == folder
    (cut / MANIFEST).write_text(json.dumps({**manifest, "round": 6}))
    with pytest.raises(CheckpointError, match="names shard shard-00001.pt, which is missing"):
        latest_checkpoint(part)
    (cut / MANIFEST).unlink()
    with pytest.raises(ConfigError, match="written by 2 process"):
        resume(part)  # one process cannot continue a 2-process checkpoint
    with pytest.raises(ConfigError, match="processes = 3, but the run ran on 2"):
        launch.resume_any(part, ["processes=3"], progress=False)

    def resumed(rank: int) -> None:
        launch.resume_any(part, progress=False)

    _in_ranks(2, resumed)
    assert json.loads((part / "summary.json").read_text())["resumed_from_round"] == 5
    _assert_same_run(full, part)
    assert not (part / CHECKPOINTS).exists()


def test_a_sigkilled_rank_leaves_the_last_complete_checkpoint_to_resume(tmp_path: Path) -> None:
    """Checkpoints every 4 of 8 rounds, rank 1 SIGKILLed after round 7's step: round 4's checkpoint
    was completed during the run (at the end of the first round after every rank's shard was
    written; round 5 is slowed down so that they are), not only when the next one is due (round 8:
    the end), so the resume continues from round 4 over 2 processes and ends with the uninterrupted
    run's numbers; rank 0 ended with the lost-contact error naming round 7."""
    config = RunConfig(**{**TINY, "algorithm": "sheaf-fmtl", "timeout_s": 3, "checkpoint_every": 4})
    full, part = tmp_path / "full", tmp_path / "part"

    def uninterrupted(rank: int) -> None:
        launch.run_rank(config, full, progress=False, overwrite=False)

    def killed(rank: int) -> None:
        step = simulate.Simulation.step

        def slow_step(self: simulate.Simulation[Any]) -> None:
            step(self)
            if self.transport.faults.round == 5:
                time.sleep(0.5)  # round 4's shards are written by now on both ranks
            if rank == 1 and self.transport.faults.round == 7:
                os.kill(os.getpid(), signal.SIGKILL)

        simulate.Simulation.step = slow_step  # type: ignore[method-assign]  # in a forked rank only
        with pytest.raises(RankLostError, match="rank 0 of 2: lost contact with the group in round 7"):
            launch.run_rank(config, part, progress=False, overwrite=False)

    _in_ranks(2, uninterrupted)
    _in_ranks(2, killed, codes=[0, -signal.SIGKILL])
    assert latest_checkpoint(part) == round_dir(part, 4) and not (part / "summary.json").exists()
    _in_ranks(2, lambda rank: launch.resume_any(part, progress=False))
    assert json.loads((part / "summary.json").read_text())["resumed_from_round"] == 4
    _assert_same_run(full, part)


@pytest.mark.parametrize("algorithm", ["fedavg", "ditto"])
def test_server_baselines_drop_clients_across_processes_as_in_one(tmp_path: Path, algorithm: str) -> None:
    """``drop_prob`` with a server baseline over 2 ranks: each rank's rows are drawn by global client
    id, so drops, bits and the averaged models are those of one process."""
    keys = {k: v for k, v in TINY.items() if k != "map_defer"}  # (a key of the learned maps only)
    config = RunConfig(**{**keys, "dataset": "synthetic", "algorithm": algorithm, "drop_prob": 0.3})
    one = execute(config, None)

    def ranks(rank: int) -> None:
        launch.run_rank(config.replace(processes=2), tmp_path / "two", progress=False, overwrite=False)

    _in_ranks(2, ranks)
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["dropped_messages"] == one.summary["dropped_messages"] > 0
    assert two["transmitted_bits"] == one.summary["transmitted_bits"]
    assert two["final"] == pytest.approx(one.summary["final"], rel=1e-6)
    thetas = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=True)["thetas"]
    for a, b in zip(one.final["thetas"], thetas, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # three commands each start 2 fresh interpreters importing torch
def test_cli_sigterm_and_resume_of_processes_2(tmp_path: Path) -> None:
    """SIGTERM to ``sheaf-fmtl run --set processes=2`` once a checkpoint exists: exit 143, one line
    naming the resume command; ``run --resume`` starts 2 ranks again and ends with the
    uninterrupted 2-process run's numbers."""
    pairs = ["rounds=300", "eval_every=10", "clients=6", "batch_size=4", "processes=2", "map_defer=3"]
    part = tmp_path / "part"
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(part), "--set", *pairs]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    parent = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while latest_checkpoint(part) is None:
        assert time.monotonic() < deadline and parent.poll() is None, parent.communicate()
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 143, err
    lines = [s for s in err.splitlines() if s.startswith("sheaf-fmtl:") and "warning" not in s]
    assert len(lines) == 1 and f"sheaf-fmtl run --resume {part}" in lines[0], err
    assert main(["run", "--resume", str(part), "--quiet"]) == 0
    assert main(["run", "--quiet", "--out", str(tmp_path / "full"), "--set", *pairs]) == 0
    _assert_same_run(tmp_path / "full", part)
