"""Two machines with their own disks, simulated by two ``--out`` folders on one host: every rank
writes its shards under its own folder, each folder gets its own manifest (listing the shards it
holds), no rank reads a file another folder holds, and a run stopped by a signal and resumed on
each "machine" from its own folder ends with the uninterrupted run's numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.data import preprocessing
from sheaf_fmtl.runtime.run.checkpoints.checkpoint import CHECKPOINTS, MANIFEST, round_dir, shard_name
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import (
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
)
from sheaf_fmtl.runtime.run.folder.folderlock import MARKER, FolderError
from sheaf_fmtl.runtime.run.launching import launch

from .checkpoints.test_checkpoint import _rows, _summary, _thetas
from .checkpoints.test_distributed_checkpoint import TINY, _in_ranks, _stop_after

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")


def _assert_same_run(full: Path, disk_a: Path, disk_b: Path) -> None:
    """The numbers of the run in one shared folder; each disk's ``preprocessing.json`` holds the
    statistics of its own rank's clients only (the other's ``elsewhere``), together the shared one's."""
    records = [preprocessing.read(d) for d in (disk_a, disk_b)]
    assert preprocessing.combine(records) == preprocessing.read(full)
    assert [bool(c.get("elsewhere")) for c in records[0]["clients"]] == [
        not c.get("elsewhere") for c in records[1]["clients"]
    ]
    got, want = _summary(disk_a), _summary(full)
    for s in (got, want):
        s["files"].pop(preprocessing.FILE)
    assert got == want
    assert _rows(disk_a) == _rows(full)
    assert all(torch.equal(x, y) for x, y in zip(_thetas(full), _thetas(disk_a), strict=True))


def test_two_folders_stopped_and_resumed_equal_the_uninterrupted_run(tmp_path: Path) -> None:
    config = RunConfig(**{**TINY, "algorithm": "sheaf-fmtl", "processes": 2})
    full, disk_a, disk_b = tmp_path / "full", tmp_path / "a" / "run", tmp_path / "b" / "run"

    def own(rank: int) -> Path:
        return disk_a if rank == 0 else disk_b

    def stopped(rank: int) -> None:
        if rank == 1:
            _stop_after(5)
        launch.run_rank(config, own(rank), progress=False, overwrite=False)

    _in_ranks(2, lambda rank: launch.run_rank(config, full, progress=False, overwrite=False))
    _in_ranks(2, stopped)
    summary = json.loads((disk_a / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_done"] == 5
    a, b = latest_checkpoint(disk_a), latest_checkpoint(disk_b)
    assert a == round_dir(disk_a, 5) and b == round_dir(disk_b, 5)
    assert sorted(p.name for p in a.glob("shard-*.pt")) == [shard_name(0)]  # each folder: its rank's
    assert sorted(p.name for p in b.glob("shard-*.pt")) == [shard_name(1)]
    manifest_b = json.loads((b / MANIFEST).read_text())
    assert manifest_b["shards"] == [shard_name(0), shard_name(1)] and manifest_b["held"] == [shard_name(1)]
    assert (disk_b / MARKER).is_file() and (disk_b / "config.yaml").is_file()
    assert not (disk_b / "summary.json").exists()  # rank 0's folder has the run's record
    with pytest.raises(CheckpointError, match="holds no shard of rank 1"):
        read_checkpoint(a, 1)
    assert not list(disk_a.glob(".sheaf-fmtl-rank-*")) and not list(disk_b.glob(".sheaf-fmtl-rank-*"))

    _in_ranks(2, lambda rank: launch.resume_any(own(rank), progress=False))
    assert json.loads((disk_a / "summary.json").read_text())["resumed_from_round"] == 5
    _assert_same_run(full, disk_a, disk_b)
    assert not (disk_a / CHECKPOINTS).exists() and not (disk_b / CHECKPOINTS).exists()


def test_ranks_whose_checkpoints_differ_resume_from_the_earlier_one_both_keep(tmp_path: Path) -> None:
    """A run stopped after folder a's manifest of round 4 was written, not folder b's: b's last
    complete checkpoint is round 2's, and a keeps its round 2 until every folder's manifest of
    round 4 is written, so both resume from round 2 and end with the uninterrupted run's numbers."""
    config = RunConfig(
        **{**TINY, "algorithm": "sheaf-fmtl", "maps": "learned", "processes": 2, "checkpoint_every": 0}
    )
    full, disk_a, disk_b = tmp_path / "full", tmp_path / "a", tmp_path / "b"

    def own(rank: int) -> Path:
        return disk_a if rank == 0 else disk_b

    def stop_at(at: int, resume: bool) -> None:
        def body(rank: int) -> None:
            if rank == 1:
                _stop_after(at)
            if resume:
                launch.resume_any(own(rank), progress=False)
            else:
                launch.run_rank(config, own(rank), progress=False, overwrite=False)

        _in_ranks(2, body)

    _in_ranks(2, lambda rank: launch.run_rank(config, full, progress=False, overwrite=False))
    stop_at(2, resume=False)
    kept = {d: tmp_path / f"kept-{d.name}" for d in (disk_a, disk_b)}
    for disk, copy in kept.items():
        shutil.copytree(round_dir(disk, 2), copy)
    stop_at(4, resume=True)
    for disk, copy in kept.items():  # a: rounds 2 and 4 complete; b: round 2, and round 4 cut short
        shutil.copytree(copy, round_dir(disk, 2))
    (round_dir(disk_b, 4) / MANIFEST).unlink()
    assert latest_checkpoint(disk_a) == round_dir(disk_a, 4) and latest_checkpoint(disk_b) == round_dir(
        disk_b, 2
    )
    _in_ranks(2, lambda rank: launch.resume_any(own(rank), progress=False))
    assert json.loads((disk_a / "summary.json").read_text())["resumed_from_round"] == 2
    _assert_same_run(full, disk_a, disk_b)


def test_a_folder_another_rank_cannot_use_is_refused_on_every_rank(tmp_path: Path) -> None:
    config = RunConfig(**{**TINY, "algorithm": "sheaf-fmtl", "processes": 2})
    disk_a, disk_b = tmp_path / "a", tmp_path / "b"
    disk_b.mkdir()
    (disk_b / "notes.txt").write_text("someone else's")

    def body(rank: int) -> None:
        want = (
            "another rank's --out cannot be used"
            if rank == 0
            else "not empty and was not written by sheaf-fmtl"
        )
        with pytest.raises(FolderError, match=want):
            launch.run_rank(config, disk_a if rank == 0 else disk_b, progress=False, overwrite=False)

    _in_ranks(2, body)
    assert not disk_a.exists()  # nothing left behind
    assert sorted(p.name for p in disk_b.iterdir()) == ["notes.txt"]


def test_a_folder_without_a_complete_checkpoint_starts_every_rank_again(tmp_path: Path) -> None:
    """Stopped before folder b's first manifest was written (a's was): every rank starts again
    from round 0, and the run ends with the uninterrupted run's numbers."""
    config = RunConfig(
        **{**TINY, "algorithm": "sheaf-fmtl", "maps": "learned", "processes": 2, "checkpoint_every": 0}
    )
    full, disk_a, disk_b = tmp_path / "full", tmp_path / "a", tmp_path / "b"

    def own(rank: int) -> Path:
        return disk_a if rank == 0 else disk_b

    def stopped(rank: int) -> None:
        if rank == 1:
            _stop_after(3)
        launch.run_rank(config, own(rank), progress=False, overwrite=False)

    _in_ranks(2, lambda rank: launch.run_rank(config, full, progress=False, overwrite=False))
    _in_ranks(2, stopped)
    (round_dir(disk_b, 3) / MANIFEST).unlink()
    assert latest_checkpoint(disk_a) == round_dir(disk_a, 3) and latest_checkpoint(disk_b) is None
    _in_ranks(2, lambda rank: launch.resume_any(own(rank), progress=False))
    summary = json.loads((disk_a / "summary.json").read_text())
    assert summary["status"] == "ok" and "resumed_from_round" not in summary
    _assert_same_run(full, disk_a, disk_b)
