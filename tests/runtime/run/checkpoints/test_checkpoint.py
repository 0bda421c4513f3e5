"""Checkpoint and resume: a run stopped (signal) or killed (SIGKILL) mid-way and resumed ends with
exactly the uninterrupted run's numbers; incomplete checkpoints are ignored; a resume that would
change the mathematics is refused."""

from __future__ import annotations

import json
import os
import shutil
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
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.metrics.flops import SampleCounter
from sheaf_fmtl.runtime.engine import simulate
from sheaf_fmtl.runtime.run import loop
from sheaf_fmtl.runtime.run.checkpoints import checkpoint as checkpoint_module
from sheaf_fmtl.runtime.run.checkpoints import shard as shard_module
from sheaf_fmtl.runtime.run.checkpoints.checkpoint import (
    CHECKPOINTS,
    MANIFEST,
    CheckpointWriter,
    atomic_write,
    round_dir,
)
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import (
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
)
from sheaf_fmtl.runtime.run.launching.resume import resume
from tests.helpers import checkpoint_thetas as _thetas
from tests.helpers import metric_rows as _rows
from tests.helpers import run_summary as _summary
from tests.helpers import signalling

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

# Kept out of the comparison: times, memory peaks, and the resume's own note.
BASE = {
    "dataset": "synthetic",
    "clients": 6,
    "rounds": 6,
    "eval_every": 2,
    "batch_size": 4,  # mini-batches: the random streams matter
    "local_epochs": 1,
    "maps": "learned",  # Algorithm 1's maps (deferred factors in the checkpoints); cases may name others
    "stability_check": False,
}
CASES = {
    "sheaf-compact-epochs": {"algorithm": "sheaf-fmtl", "map_defer": 4, "save_maps": False},
    "sheaf-compact-steps": {"algorithm": "sheaf-fmtl", "map_defer": 4, "local_epochs": 0},
    "sheaf-literal-epochs": {"algorithm": "sheaf-fmtl", "map_defer": 4, "message_mode": "literal"},
    "sheaf-faults": {"algorithm": "sheaf-fmtl", "map_defer": 4, "drop_prob": 0.2, "link_drop_prob": 0.2},
    "sheaf-redrawn-estimates-faults": {
        "algorithm": "sheaf-fmtl",
        "maps": "redrawn",
        "estimates": True,
        "gamma": 0.2,
        "drop_prob": 0.2,
        "link_drop_prob": 0.2,
    },
    "sheaf-features": {"algorithm": "sheaf-fmtl", "maps": "features", "dataset": "synthetic-clusters"},
    "dfedu": {"algorithm": "dfedu"},
    "dpsgd": {"algorithm": "dpsgd"},
    "fedavg": {"algorithm": "fedavg"},
    "ditto": {"algorithm": "ditto"},
    "pfedme": {"algorithm": "pfedme", "inner_steps": 2},
    "perfedavg": {"algorithm": "perfedavg"},
    "fedavg-ft": {"algorithm": "fedavg-ft", "finetune_epochs": 2},
    "dpsgd-ft-faults": {"algorithm": "dpsgd-ft", "drop_prob": 0.2, "link_drop_prob": 0.2},
    "partial": {"algorithm": "partial", "model": "tests._baselines_problems:mlp"},
    "dfedu-batchnorm": {"algorithm": "dfedu", "model": "tests._baselines_problems:mlp_bn"},
    "local-transform": {
        "algorithm": "local",
        "transform": "tests.algorithms.training.test_transform:flip_sign",
    },
}

SLOW_CASES = ("dfedu-batchnorm", "local-transform")  # (make test-slow)


def _assert_same_run(a: Path, b: Path) -> None:
    assert _summary(b) == _summary(a)
    assert _rows(b) == _rows(a)
    assert all(torch.equal(x, y) for x, y in zip(_thetas(a), _thetas(b), strict=True))
    norms = [torch.load(p / "checkpoint.pt", weights_only=True).get("batchnorm") for p in (a, b)]
    assert (norms[0] is None) == (norms[1] is None)
    for x, y in zip(norms[0] or [], norms[1] or [], strict=True):  # each client's own statistics
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def _stopped(config: RunConfig, out: Path, at: int) -> dict[str, Any]:
    """Run ``config`` into ``out``, SIGTERM to this process after round ``at`` (in process)."""
    sim = simulate.build_simulation(config)
    sim.step = signalling(sim.step, at)  # type: ignore[method-assign]
    return loop.execute(config, out, sim=sim).summary


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.slow) if c in ("dfedu-batchnorm", "local-transform") else c
        for c in CASES
    ],
)
def test_stopped_and_resumed_run_equals_the_uninterrupted_one(tmp_path, case):
    config = RunConfig(**{**BASE, **CASES[case]})
    loop.execute(config, tmp_path / "full")
    stopped = _stopped(config, tmp_path / "part", at=3)
    assert stopped["status"] == "interrupted" and stopped["rounds_done"] == 3
    folder = latest_checkpoint(tmp_path / "part")
    assert folder is not None and folder.name == "round-00000003"
    manifest, shard = read_checkpoint(folder)
    assert [r["round"] for r in manifest["rows"]] == [0, 2]  # not the stop's own evaluation
    learned = config.algorithm == "sheaf-fmtl" and config.maps in ("learned", "fixed")
    if learned:  # resumable checkpoints hold the maps, deferred factors pending
        assert shard["state"]["store"]["base"] and any(shard["state"]["store"]["count"])
    outcome = resume(tmp_path / "part", trust=":" in config.model + config.transform)  # (test code)
    assert outcome.summary["resumed_from_round"] == 3 and outcome.summary["status"] == "ok"
    _assert_same_run(tmp_path / "full", tmp_path / "part")
    if config.drop_prob > 0:  # the simulated faults resume with their draws and counts
        assert outcome.summary["dropped_messages"] > 0
    assert not (tmp_path / "part" / CHECKPOINTS).exists()  # finished: checkpoint.pt is the result
    final = torch.load(tmp_path / "part" / "checkpoint.pt", weights_only=True)
    assert ("maps" in final) == (learned and config.save_maps)
    if config.estimates:  # the neighbours' copies resume too (they shape the rows after the stop)
        assert shard["state"]["estimates"] and shard["state"]["own_copies"]
    if config.maps == "features":  # the supports' coordinates are structure, rebuilt on resume
        assert "constant_coords" not in shard["state"] and shard["state"]["round"] == 3


def test_periodic_checkpoint_is_resumable_after_a_later_partial_write(tmp_path):
    """Stopped at round 5 with checkpoints every 4 rounds: a later checkpoint cut short (a shard
    without a manifest, a leftover temporary file) is passed over, and the resume says so; a
    manifest naming a missing shard is refused until its folder is removed."""
    config = RunConfig(**{**BASE, "algorithm": "sheaf-fmtl", "checkpoint_every": 4, "map_defer": 3})
    loop.execute(config, tmp_path / "full")
    part = tmp_path / "part"
    _stopped(config, part, at=5)
    good = latest_checkpoint(part)
    assert good is not None and good.name == "round-00000005"
    cut = round_dir(part, 6)
    cut.mkdir()
    (cut / "shard-00000.pt").write_bytes(b"half a shard")
    (cut / f".{MANIFEST}.tmp-1-2").write_text("{")
    bad = round_dir(part, 7)
    bad.mkdir()
    (bad / MANIFEST).write_text(json.dumps({"format": 1, "round": 7, "shards": ["shard-00000.pt"]}))
    with pytest.raises(CheckpointError, match="round-00000007/manifest.json names shard.*missing"):
        latest_checkpoint(part)
    shutil.rmtree(bad)  # the user removes the folder the message names
    assert latest_checkpoint(part) == good
    with pytest.warns(UserWarning, match="round 5; the later one of round 6 was cut short"):
        resume(part)
    _assert_same_run(tmp_path / "full", part)


def test_resume_raises_rounds_and_refuses_a_change_of_the_mathematics(tmp_path):
    config = RunConfig(**{**BASE, "algorithm": "dfedu"})
    loop.execute(config.replace(rounds=10), tmp_path / "full")
    _stopped(config, tmp_path / "part", at=3)
    with pytest.raises(ConfigError, match="'lam'.*mathematics"):
        resume(tmp_path / "part", ["lam=0.5"])
    with pytest.raises(ConfigError, match="'seed'"):
        resume(tmp_path / "part", keys={"seed": 3})
    with pytest.raises(ConfigError, match="below the round"):
        resume(tmp_path / "part", ["rounds=2"])
    with pytest.raises(
        ConfigError,
        match="with its own config and folder; drop the config",
    ):
        sheaf_fmtl.run(config, resume=tmp_path / "part")
    result = sheaf_fmtl.run(resume=tmp_path / "part", rounds=10)  # the Python API
    assert result.out == tmp_path / "part" and result.summary["resumed_from_round"] == 3
    _assert_same_run(tmp_path / "full", tmp_path / "part")
    with pytest.raises(ConfigError, match="no resumable checkpoint"):
        resume(tmp_path / "part", ["rounds=12"])


def test_cli_resume_and_its_one_line_errors(tmp_path, capsys, monkeypatch):
    argv = ["--set", "rounds=6", "eval_every=2", "clients=4", "batch_size=4", "--quiet"]
    assert main(["run", *argv, "--out", str(tmp_path / "full")]) == 0
    step = simulate.Simulation.step
    monkeypatch.setattr(simulate.Simulation, "step", signalling(step, 3, signal.SIGINT))
    assert main(["run", *argv, "--out", str(tmp_path / "part")]) == 130
    monkeypatch.setattr(simulate.Simulation, "step", step)
    capsys.readouterr()
    for bad, fragment in [
        (["--out", str(tmp_path / "x")], "drop --out"),
        (["--set", "alpha=0.1"], "'alpha'"),
    ]:
        assert main(["run", "--resume", str(tmp_path / "part"), *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error:") and fragment in err, err
    assert main(["run", "--resume", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such run folder" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path / "part"), "--quiet"]) == 0
    _assert_same_run(tmp_path / "full", tmp_path / "part")


def test_checkpoint_every_zero_writes_none_unless_stopped(tmp_path):
    config = RunConfig(**{**BASE, "algorithm": "local", "checkpoint_every": 0})
    loop.execute(config, tmp_path / "full")
    assert not (tmp_path / "full" / CHECKPOINTS).exists()
    _stopped(config, tmp_path / "part", at=2)
    assert latest_checkpoint(tmp_path / "part") == round_dir(tmp_path / "part", 2)


def test_atomic_write_keeps_the_old_file_when_a_write_fails(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write(path, lambda f: f.write(b"old"))

    def fail(f: Any) -> None:
        f.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


def test_writer_keeps_one_complete_checkpoint_and_reports_errors(tmp_path):
    writer = CheckpointWriter(tmp_path)
    for k in (2, 4):
        writer.save(k, {"x": torch.full((3,), float(k))}, {"rows": []})
    writer.wait()
    assert [p.name for p in (tmp_path / CHECKPOINTS).iterdir()] == ["round-00000004"]
    manifest, shard = read_checkpoint(round_dir(tmp_path, 4))
    assert manifest["round"] == 4 and torch.equal(shard["x"], torch.full((3,), 4.0))
    blocked = tmp_path / "blocked"
    (blocked / CHECKPOINTS).parent.mkdir()
    (blocked / CHECKPOINTS).write_text("a file where the checkpoint folder goes")
    writer = CheckpointWriter(blocked)
    writer.save(6, {"x": torch.zeros(1)}, {"rows": []})  # fails in the background thread...
    with pytest.raises(OSError):
        writer.wait()  # ...and the error reaches the run
    writer.wait()  # reported once


def _manifest_exists(run: Path) -> bool:
    return (run / CHECKPOINTS).is_dir() and latest_checkpoint(run) is not None


@pytest.mark.slow  # a fresh interpreter imports torch (5-15 s)
def test_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path):
    """A real ``sheaf-fmtl run`` process, SIGKILLed once a checkpoint exists, then resumed."""
    argv = ["--set", "rounds=400", "eval_every=10", "clients=6", "batch_size=4", "local_epochs=1", "--quiet"]
    run = tmp_path / "killed"
    args = [*argv, "--out", str(run)]
    code = f"import sys; from sheaf_fmtl.cli import main; sys.exit(main(['run', *{args!r}]))"
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 120
    while not _manifest_exists(run):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and not (run / "summary.json").exists()
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    assert main(["run", *argv, "--out", str(tmp_path / "full")]) == 0
    _assert_same_run(tmp_path / "full", run)


def test_a_fold_waits_for_the_background_write_of_the_maps(tmp_path, monkeypatch):
    """The maps are written from the run's own tensors: the next fold must wait for the write,
    so the checkpoint holds the maps of its round, not the folded ones."""
    config = RunConfig(**{**BASE, "algorithm": "sheaf-fmtl", "map_defer": 2, "local_epochs": 0})
    sim = simulate.build_simulation(config)
    counter = SampleCounter(sim.ctx.fed)
    sim.step()  # one rank-one step pending in every bucket
    store = sim.state.store
    assert store is not None and all(c == 1 for c in store.count)
    before = [p.clone() for p in store.base]
    slow_write = checkpoint_module.write_checkpoint

    def slow(*args: Any) -> Path:
        time.sleep(0.3)
        return slow_write(*args)

    monkeypatch.setattr(checkpoint_module, "write_checkpoint", slow)
    writer = CheckpointWriter(tmp_path)
    writer.save(1, shard_module.snapshot(sim, counter, guard=writer.wait), {"rows": []})
    sim.step()  # the second pending step folds the maps in place: after the write
    assert not all(torch.equal(a, b) for a, b in zip(before, store.base, strict=True))
    writer.wait()
    _, shard = read_checkpoint(round_dir(tmp_path, 1))
    assert all(torch.equal(a, b) for a, b in zip(before, shard["state"]["store"]["base"], strict=True))
    counter.detach()


def test_a_sharded_checkpoint_counts_only_with_every_shard_and_its_manifest(tmp_path):
    """Two processes: each writes its shard, then one writes the manifest naming both."""
    for rank in (0, 1):
        checkpoint_module.write_shard(tmp_path, 3, {"rank": torch.tensor(rank)}, rank=rank)
    assert latest_checkpoint(tmp_path) is None  # no manifest yet
    checkpoint_module.write_manifest(tmp_path, 3, {"rows": []}, world=2)
    folder = round_dir(tmp_path, 3)
    assert latest_checkpoint(tmp_path) == folder
    assert int(read_checkpoint(folder, rank=1)[1]["rank"]) == 1
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["files"]["shard-00001.pt"]["bytes"] == (folder / "shard-00001.pt").stat().st_size
    (folder / "shard-00001.pt").unlink()
    with pytest.raises(CheckpointError, match="shard-00001.pt, which is missing"):
        latest_checkpoint(tmp_path)  # a checkpoint missing a shard is refused, not skipped
