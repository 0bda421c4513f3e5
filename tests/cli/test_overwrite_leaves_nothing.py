"""``--overwrite`` leaves nothing of the earlier run (what its shipped callbacks and TensorBoard logger
wrote into the folder, a sweep's ``sweep.csv`` / ``best.yaml``) and nothing of the user's goes; a command
that continues its folder continues only a folder of its own kind; ``table`` and ``bench`` never
replace a file of the user's; the folder's lock is never lifted by the environment."""

from __future__ import annotations

import fcntl
import os

import pytest

import sheaf_fmtl
from sheaf_fmtl.callbacks import BestCheckpoint
from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder.folderlock import HELD_ENV, HELD_FD_ENV, MARKER, FolderError
from sheaf_fmtl.runtime.run.folder.ledger import owned_names
from sheaf_fmtl.runtime.run.folder.rundir import check_out_dir, mark
from tests.helpers import error_line, folder_snapshot

KEYS = {"clients": 4, "rounds": 2, "eval_every": 1, "batch_size": 4}
SETS = [a for k, v in KEYS.items() for a in ("--set", f"{k}={v}")]


def test_overwrite_removes_what_the_runs_callbacks_and_logger_wrote(tmp_path):
    out = tmp_path / "run"
    callbacks = [BestCheckpoint(), BestCheckpoint(filename="kept.pt")]
    sheaf_fmtl.run(out=out, callbacks=callbacks, log_tensorboard=str(out / "tb"), **KEYS)
    assert (out / "best.pt").is_file() and any((out / "tb").iterdir()) and (out / "kept.pt").is_file()
    assert owned_names(out) == {"tb", "kept.pt"}  # (best.pt: a run folder's own file)
    (out / "notes.md").write_text("mine")  # the user's, written after the run
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    left = {p.name for p in out.iterdir()}
    assert not left & {"best.pt", "tb", "kept.pt"}, left
    assert (out / "notes.md").read_text() == "mine" and "summary.json" in left


def test_overwrite_of_a_sweep_folder_removes_its_ranking_and_best_config(tmp_path, capsys):
    out = tmp_path / "sw"
    grid = ["sweep", "--grid", "lam=0.01", "--validation", "0.3", "--out", str(out), *SETS]
    assert main([*grid, "--quiet"]) == 0
    assert (out / "sweep.csv").is_file() and (out / "best.yaml").is_file()
    capsys.readouterr()
    assert main(["run", *SETS, "--quiet", "--out", str(out), "--overwrite"]) == 0
    left = {p.name for p in out.iterdir()}
    assert not left & {"sweep.csv", "best.yaml", "cells"}, left


@pytest.mark.parametrize(
    "kind, argv",
    [
        ("seeds", ["sweep", "--grid", "lam=0.01", "--validation", "0.3", "--quiet", *SETS]),
        ("sweep", ["reproduce", "heterogeneous", "--quick", "--seeds", "1", "--quiet"]),
        ("run", ["sweep", "--grid", "lam=0.01", "--validation", "0.3", "--quiet", *SETS]),
    ],
)
def test_a_command_continues_only_a_folder_of_its_own_kind(tmp_path, capsys, kind, argv):
    out = mark(tmp_path / "theirs", kind)
    (out / "aggregate.json").write_text("{}")  # what the other command wrote
    before = folder_snapshot(out)
    assert main([*argv, "--out", str(out)]) == 2
    err = error_line(capsys)
    assert f"holds a sheaf-fmtl {kind} folder" in err and str(out) in err
    assert folder_snapshot(out) == before


def test_table_never_replaces_a_file_unasked(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", *SETS, "--quiet", "--out", str(run)]) == 0
    user = tmp_path / "docs"
    user.mkdir()
    (user / "table.md").write_text("my table")
    assert main(["table", str(run), "--out", str(user)]) == 2
    err = error_line(capsys)
    assert "table.md exists; add --overwrite to replace it" in err
    assert (user / "table.md").read_text() == "my table" and not (user / "table.csv").exists()
    assert main(["table", str(run), "--out", str(user), "--name", "runs"]) == 0
    first = (user / "runs.md").read_text()
    assert main(["table", str(run), "--out", str(user), "--name", "runs"]) == 2  # not even its own, unasked
    capsys.readouterr()
    assert main(["table", str(run), "--out", str(user), "--name", "runs", "--overwrite"]) == 0
    assert (user / "runs.md").read_text() == first and (user / "table.md").read_text() == "my table"
    assert {p.name for p in user.iterdir()} == {"table.md", "runs.md", "runs.csv"}
    capsys.readouterr()


def test_bench_never_replaces_a_users_file(tmp_path, capsys):
    out = tmp_path / "results"
    out.mkdir()
    (out / "bench.json").write_text('{"mine": 1}')
    assert main(["bench", "--smoke", "--out", str(out)]) == 2
    err = error_line(capsys)
    assert "bench.json exists and was not written by sheaf-fmtl" in err
    assert folder_snapshot(out) == {"bench.json": b'{"mine": 1}'}


def test_the_environment_never_lifts_a_live_runs_lock(tmp_path, monkeypatch):
    """Another process's lock (here a second open of the marker, as a live run holds it): naming
    the folder in the variable a launcher gives its ranks, with or without a descriptor of the
    marker, does not let ``--overwrite`` through; the lock's own descriptor does."""
    out = mark(tmp_path / "live")
    (out / "summary.json").write_text("{}")
    holder = os.open(out / MARKER, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    other = os.open(out / MARKER, os.O_RDONLY)  # a descriptor of the marker that holds no lock
    try:
        monkeypatch.setenv(HELD_ENV, str(out.resolve()))
        for fd in (None, other, 12345):
            if fd is None:
                monkeypatch.delenv(HELD_FD_ENV, raising=False)
            else:
                monkeypatch.setenv(HELD_FD_ENV, str(fd))
            with pytest.raises(FolderError, match="in use by another sheaf-fmtl process"):
                check_out_dir(out, overwrite=True)
        monkeypatch.setenv(HELD_FD_ENV, str(holder))  # a rank started with the lock's descriptor
        assert check_out_dir(out, overwrite=True) == out
    finally:
        os.close(other)
        os.close(holder)


@pytest.mark.slow
def test_plot_never_replaces_a_users_figure_but_its_own(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", *SETS, "--quiet", "--out", str(run)]) == 0
    user = tmp_path / "figures"
    user.mkdir()
    (user / "metric_vs_rounds_and_bits.png").write_bytes(b"my figure")
    assert main(["plot", str(run), "--out", str(user)]) == 2
    assert "metric_vs_rounds_and_bits.png exists and was not written by sheaf-fmtl" in error_line(capsys)
    assert folder_snapshot(user) == {"metric_vs_rounds_and_bits.png": b"my figure"}
    mine = tmp_path / "mine"
    assert main(["plot", str(run), "--out", str(mine)]) == 0
    assert main(["plot", str(run), "--out", str(mine)]) == 0  # its own figures: replaced
    assert "metric_vs_rounds_and_bits.png" in owned_names(mine)
    capsys.readouterr()
