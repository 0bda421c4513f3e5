"""A ``processes = K`` launcher killed (SIGKILL: an out-of-memory killer, a closed session): its
ranks stop after the same round with a checkpoint, hold the run folder's lock while they live
(``--resume`` / ``--overwrite`` refused), and the folder then resumes to the uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.run.folder.folderlock import held_lock, is_locked
from sheaf_fmtl.runtime.run.folder.rundir import claim
from sheaf_fmtl.runtime.run.loop import execute

TINY = {"clients": 5, "graph_p": 0.6, "data.min_samples": 20, "data.max_samples": 30}


def test_a_process_started_with_the_lock_holds_the_folder_after_its_starter_let_go(tmp_path: Path) -> None:
    """The mechanism: the lock's descriptor passed to a child keeps the folder locked until the
    child ends, although the claim that took it has ended."""
    out = tmp_path / "run"
    with claim(out):
        fd = held_lock(out)
        assert fd is not None
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(fd,))
    try:
        assert is_locked(out)
        assert main(["run", "--resume", str(out), "--quiet"]) == 2
        assert (
            main(["run", "--set", "rounds=1", "clients=4", "--out", str(out), "--overwrite", "--quiet"]) == 2
        )
    finally:
        child.kill()
        child.wait()
    assert not is_locked(out)


def _ranks(parent: int) -> list[int]:
    """The pids of ``parent``'s children (its ranks)."""
    return [int(p) for p in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the ranks")


@LINUX
@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_a_killed_launcher_ends_its_ranks_which_hold_the_folder_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Default suite (about 20 s: three interpreters start)."""
    _kill_the_launcher(tmp_path, capsys)


@LINUX
@pytest.mark.slow
def test_a_folder_whose_ranks_ended_resumes_to_the_uninterrupted_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, out = _kill_the_launcher(tmp_path, capsys)
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    config = RunConfig(**{k: v for k, v in settings.items() if "." not in k}).replace(
        processes=1, data={k[5:]: v for k, v in settings.items() if k.startswith("data.")}
    )
    one = execute(config, None)
    assert resumed["status"] == "ok" and resumed["transmitted_bits"] == one.summary["transmitted_bits"]
    np.testing.assert_allclose(resumed["per_client"], one.summary["per_client"], rtol=1e-5, atol=1e-6)
    assert resumed["final"] == pytest.approx(one.summary["final"], rel=1e-5)
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [r["round"] for r in one.rows]


def _kill_the_launcher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], Path]:
    """SIGKILL a 2-process run's launcher mid-run (rank 1 held stopped meanwhile): the folder is
    refused to ``--resume`` and ``--overwrite`` while a rank lives; both end within seconds of
    rank 1 going on, recorded as stopped by SIGTERM. The settings and the run folder."""
    settings: dict[str, object] = {**TINY, "rounds": 300, "eval_every": 10, "processes": 2}
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(out), "--set"]
    argv += [f"{k}={v}" for k, v in settings.items()]
    launcher = subprocess.Popen(
        argv, stderr=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True
    )
    metrics, deadline = out / "metrics.csv", time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 2):  # round 10 evaluated
        assert time.monotonic() < deadline and launcher.poll() is None, "the run did not start"
        time.sleep(0.02)
    ranks = _ranks(launcher.pid)
    assert len(ranks) == 2
    os.kill(ranks[1], signal.SIGSTOP)  # rank 1 cannot end before the checks below
    launcher.kill()
    launcher.wait()
    try:
        # the launcher is gone; its ranks hold the folder: resume and overwrite are refused
        assert main(["run", "--resume", str(out), "--quiet"]) == 2
        assert "in use by another sheaf-fmtl process" in capsys.readouterr().err
        assert main(["run", "--set", "rounds=1", "--out", str(out), "--overwrite", "--quiet"]) == 2
        assert "in use" in capsys.readouterr().err
    finally:
        os.kill(ranks[1], signal.SIGCONT)  # its SIGTERM (the launcher ended) is delivered now
    stopped = time.monotonic()
    while any(_alive(p) for p in ranks):
        assert time.monotonic() - stopped < 30, "the ranks outlived their launcher"
        time.sleep(0.05)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    assert 0 < summary["rounds_done"] < 300
    return settings, out


@LINUX
@pytest.mark.slow
def test_a_rank_whose_launcher_and_peer_died_leaves_within_timeout_s(tmp_path: Path) -> None:
    """SIGKILL to the launcher and to rank 1 at once: rank 0 (its SIGTERM pending while it waits
    for the dead peer) leaves its collective within ``timeout_s`` and ends; the folder is free."""
    settings = {**TINY, "rounds": 100000, "eval_every": 10, "processes": 2, "timeout_s": 5}
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(out), "--set"]
    argv += [f"{k}={v}" for k, v in settings.items()]
    launcher = subprocess.Popen(
        argv, stderr=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True
    )
    metrics, deadline = out / "metrics.csv", time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 2):
        assert time.monotonic() < deadline and launcher.poll() is None, "the run did not start"
        time.sleep(0.02)
    rank0, rank1 = _ranks(launcher.pid)
    os.kill(rank1, signal.SIGKILL)
    launcher.kill()
    launcher.wait()
    killed = time.monotonic()
    while _alive(rank0) or _alive(rank1):  # (SIGKILL waits for a write in progress, e.g. an fsync)
        assert time.monotonic() - killed < 5 + 20, "a rank outlived its launcher and its peer"
        time.sleep(0.05)
    ended = time.monotonic()  # a dead holder's lock can outlast it briefly (the kernel's deferred close)
    while is_locked(out):
        assert time.monotonic() - ended < 5, "the folder stayed locked after its ranks ended"
        time.sleep(0.05)
