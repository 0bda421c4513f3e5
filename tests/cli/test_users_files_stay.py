"""A file or folder of the user's that appears in a run folder while a run writes it (saved there by
hand, by a callback of the user's, or a folder of the user's that a TensorBoard log goes into) is
never named in the folder's ledger, and no later command removes it: ``--overwrite`` of a run, of a
sweep, a resume. The ledger names only what sheaf-fmtl itself created."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import sheaf_fmtl
from sheaf_fmtl.callbacks import BestCheckpoint
from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder.clearing import clear
from sheaf_fmtl.runtime.run.folder.folderlock import FolderError
from sheaf_fmtl.runtime.run.folder.ledger import owned_names, record_owned
from sheaf_fmtl.runtime.run.folder.rundir import mark

KEYS = {"clients": 4, "rounds": 3, "eval_every": 1, "batch_size": 4}
SETS = [a for k, v in KEYS.items() for a in ("--set", f"{k}={v}")]


class SavesWhileItRuns:
    """What a user does during a long run: saves a note, a folder of notes, a link, in the run folder
    (here from a callback, so that it happens while the run writes the folder)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_round_end(self, round: int, metrics: dict | None, view: object) -> None:
        if round == 1:
            (self.out / "notes.txt").write_text("mine")
            (self.out / "analysis").mkdir()
            (self.out / "analysis" / "plot.py").write_text("print('mine')")
            (self.out / "tb-mine").mkdir()  # a folder of the user's that the log goes into below
            (self.out / "link-to-notes").symlink_to(self.out / "notes.txt")


def _mine(out: Path) -> dict[str, str]:
    return {
        "notes.txt": (out / "notes.txt").read_text(),
        "plot.py": (out / "analysis" / "plot.py").read_text(),
        "link": str((out / "link-to-notes").readlink()),
    }


def test_files_saved_during_a_run_are_never_in_the_ledger_nor_removed(tmp_path):
    out = tmp_path / "r"
    sheaf_fmtl.run(out=out, callbacks=[SavesWhileItRuns(out)], **KEYS)
    assert not owned_names(out) & {"notes.txt", "analysis", "tb-mine", "link-to-notes"}, owned_names(out)
    mine = _mine(out)
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)  # the documented reproduction
    assert _mine(out) == mine and (out / "tb-mine").is_dir()
    assert main(["run", *SETS, "--quiet", "--out", str(out), "--overwrite"]) == 0  # from the command line
    assert _mine(out) == mine


def test_a_log_into_a_users_folder_in_the_run_folder_leaves_that_folder(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    sheaf_fmtl.run(out=out, **KEYS)
    (out / "logs").mkdir()
    (out / "logs" / "README").write_text("my logs")
    sheaf_fmtl.run(out=out, overwrite=True, log_tensorboard=str(out / "logs" / "tb"), **KEYS)
    assert "logs" not in owned_names(out)  # (it was there before: the user's)
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    assert (out / "logs" / "README").read_text() == "my logs"


def test_a_log_folder_the_run_created_is_its_own_and_cleared(tmp_path):
    out = tmp_path / "r"
    sheaf_fmtl.run(out=out, log_tensorboard=str(out / "tb" / "deep"), **KEYS)
    assert owned_names(out) == {"tb"}
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    assert not (out / "tb").exists()


def test_a_callbacks_file_never_replaces_a_users_file(tmp_path):
    out = tmp_path / "r"
    sheaf_fmtl.run(out=out, **KEYS)
    (out / "model.pt").write_bytes(b"my model")
    with pytest.raises(FolderError, match="model.pt exists and was not written by sheaf-fmtl"):
        sheaf_fmtl.run(out=out, overwrite=True, callbacks=[BestCheckpoint(filename="model.pt")], **KEYS)
    assert (out / "model.pt").read_bytes() == b"my model"


def test_overwrite_of_a_sweep_keeps_what_the_user_saved_in_it_and_its_cells(tmp_path, capsys):
    out = tmp_path / "sw"
    grid = ["sweep", "--grid", "lam=0.01,0.1", "--validation", "0.3", "--out", str(out), "--quiet", *SETS]
    assert main(grid) == 0
    cell = next(p for p in out.rglob("config.yaml")).parent
    (out / "my-ranking.csv").write_text("mine")
    (cell / "note.txt").write_text("mine too")
    assert main(["run", *SETS, "--quiet", "--out", str(out), "--overwrite"]) == 0
    assert (out / "my-ranking.csv").read_text() == "mine" and (cell / "note.txt").read_text() == "mine too"
    assert not (out / "sweep.csv").exists()
    capsys.readouterr()


def test_a_file_of_yours_inside_a_folder_sheaf_fmtl_created_stays_with_that_folder(tmp_path):
    out = tmp_path / "r"
    sheaf_fmtl.run(out=out, log_tensorboard=str(out / "tb" / "deep"), **KEYS)
    (out / "tb" / "deep" / "my-notes.txt").write_text("mine")
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    left = sorted(p.relative_to(out / "tb").as_posix() for p in (out / "tb").rglob("*"))
    assert left == ["deep", "deep/my-notes.txt"], left  # TensorBoard's event files gone, yours kept
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    assert (out / "tb" / "deep" / "my-notes.txt").read_text() == "mine"


def test_a_copy_of_a_run_kept_in_a_run_folder_is_yours(tmp_path):
    out, copy = tmp_path / "r", tmp_path / "r" / "backup"
    sheaf_fmtl.run(out=out, **KEYS)
    sheaf_fmtl.run(out=tmp_path / "other", **KEYS)
    shutil.copytree(tmp_path / "other", copy)  # (with its marker)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    sheaf_fmtl.run(out=out, overwrite=True, **KEYS)
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before


def test_a_nested_ledger_names_only_its_own_files(tmp_path):
    """A reproduction's figures: each file in its own folder's ledger; a file of yours beside them stays."""
    out = mark(tmp_path / "rep", "reproduce")
    figures = out / "figures" / "exp"
    figures.mkdir(parents=True)
    for name in ("curve.png", "mine.png"):
        (figures / name).write_bytes(b"png")
    record_owned(figures, ["curve.png"])
    record_owned(out, ["figures"])
    assert clear(out)
    assert sorted(p.name for p in figures.iterdir()) == ["mine.png"]
    assert owned_names(out) == {"figures"}  # (still there: it holds a file of yours)
