"""A folder holds one run at a time and says what it is: ``--overwrite`` makes the marker say the
new kind (a sweep's folder overwritten by a run is continued by no ``sweep`` / ``run --seeds``), and
two runs of one Python process into one folder (a callback's run into its own run's folder, two
threads) are refused in one line, the first run's files left whole."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder.folderlock import FolderError
from sheaf_fmtl.runtime.run.folder.rundir import marker_kind
from tests.helpers import error_line

KEYS = {"clients": 4, "rounds": 3, "eval_every": 1, "batch_size": 4}
SETS = [a for k, v in KEYS.items() for a in ("--set", f"{k}={v}")]
SWEEP = ["sweep", "--grid", "lam=0.01", "--validation", "0.3", "--quiet", *SETS]


def test_overwrite_makes_a_sweeps_folder_a_runs(tmp_path, capsys):
    out = tmp_path / "f"
    assert main([*SWEEP, "--out", str(out)]) == 0 and marker_kind(out) == "sweep"
    assert main(["run", *SETS, "--quiet", "--out", str(out), "--overwrite"]) == 0
    assert marker_kind(out) == "run"
    capsys.readouterr()
    for argv in (SWEEP, ["run", "--seeds", "0,1", "--quiet", *SETS]):
        before = sorted(p.name for p in out.iterdir())
        assert main([*argv, "--out", str(out)]) == 2
        assert "holds a sheaf-fmtl run folder" in error_line(capsys)
        assert sorted(p.name for p in out.iterdir()) == before


def test_overwrite_from_python_makes_a_seeds_folder_a_runs(tmp_path, capsys):
    out = tmp_path / "f"
    assert main(["run", "--seeds", "0,1", "--quiet", *SETS, "--out", str(out)]) == 0
    assert marker_kind(out) == "seeds"
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    assert marker_kind(out) == "run"
    capsys.readouterr()
    assert main(["run", "--seeds", "0,1", "--quiet", *SETS, "--out", str(out)]) == 2
    assert "holds a sheaf-fmtl run folder" in error_line(capsys)


class RunsIntoItsOwnFolder:
    def __init__(self, out: Path, overwrite: bool) -> None:
        self.out, self.overwrite = out, overwrite
        self.error: object = None

    def on_round_end(self, round: int, metrics: dict | None, view: object) -> None:
        if round == 1:
            try:
                sheaf_fmtl.run(out=self.out, overwrite=self.overwrite, seed=9, **KEYS)
            except FolderError as e:
                self.error = e


@pytest.mark.parametrize("overwrite", [True, False])
def test_a_callbacks_run_into_its_own_runs_folder_is_refused(tmp_path, overwrite):
    out = tmp_path / "r"
    cb = RunsIntoItsOwnFolder(out, overwrite)
    sheaf_fmtl.run(out=out, callbacks=[cb], **KEYS)
    assert isinstance(cb.error, FolderError)
    assert "being written by another run of this process" in str(cb.error) or "not empty" in str(cb.error)
    config = sheaf_fmtl.load(out).config
    assert config["seed"] == 0 and json.loads((out / "summary.json").read_text())["seed"] == 0


def test_two_threads_never_both_write_one_folder(tmp_path):
    out = tmp_path / "r"
    errors: list[BaseException] = []
    started = threading.Event()

    class Waits:
        def on_round_end(self, round: int, metrics: dict | None, view: object) -> None:
            if round == 1:
                started.set()
                second.join(timeout=120)  # the other thread tries while this run writes the folder

    def other() -> None:
        started.wait(timeout=120)
        try:
            sheaf_fmtl.run(out=out, overwrite=True, seed=5, **KEYS)
        except FolderError as e:
            errors.append(e)

    second = threading.Thread(target=other)
    second.start()
    sheaf_fmtl.run(out=out, callbacks=[Waits()], **KEYS)
    second.join()
    assert len(errors) == 1 and "another thread of this process" in str(errors[0]), errors
    assert sheaf_fmtl.load(out).config["seed"] == 0
