"""Run folders are owned: every command that writes leaves a folder of the user's files as it was
(refused in one line, exit status 2, or writing only beside them), ``--overwrite`` and ``--resume``
act only on folders sheaf-fmtl marked, never through a symbolic link, never on a folder a live
process holds, and ``--overwrite`` clears only after the run is built."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder.clearing import clear
from sheaf_fmtl.runtime.run.folder.folderlock import MARKER, is_marked
from sheaf_fmtl.runtime.run.folder.rundir import claim
from tests.helpers import folder_snapshot

TINY = ["--set", "rounds=2", "eval_every=1", "clients=4", "--quiet"]


def _user_folder(path: Path, outside: Path) -> Path:
    """A folder of the user's own files, some with the names a run writes."""
    (path / "src").mkdir(parents=True)
    (path / "src" / "main.py").write_text("print('the user's code')\n")
    (path / "config.yaml").write_text("lam: 0.5\n")  # the user's config, not a run's
    (path / "metrics.csv").write_text("round,loss\n0,1.0\n")
    (path / "summary.json").write_text('{"mine": true}\n')
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "notes.txt").write_text("my notes\n")
    (path / "data_link").symlink_to(outside, target_is_directory=True)
    return path


@pytest.fixture
def owned(tmp_path, monkeypatch):
    """``(user folder, outside folder)``: outside holds files a link points at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("do not delete\n")
    user = _user_folder(tmp_path / "user", outside)
    monkeypatch.chdir(tmp_path)
    return user, outside


def _run(tmp_path: Path, name: str = "run", *extra: str) -> Path:
    out = tmp_path / name
    assert main(["run", *TINY, "--out", str(out), *extra]) == 0
    return out


# Every command that writes, pointed at the user's folder (``U``); each is refused before any work.
REFUSED = [
    ("run", ["run", *TINY, "--out", "U"], "not empty"),
    ("run-overwrite", ["run", *TINY, "--out", "U", "--overwrite"], "not written by sheaf-fmtl"),
    ("run-resume", ["run", "--resume", "U"], "not a run folder written by sheaf-fmtl"),
    ("run-seeds", ["run", *TINY, "--seeds", "0,1", "--out", "U"], "not written by sheaf-fmtl"),
    ("demo", ["demo", *TINY, "--out", "U"], "not empty"),
    ("demo-overwrite", ["demo", *TINY, "--out", "U", "--overwrite"], "create an empty .sheaf-fmtl-run in it"),
    ("sweep", ["sweep", *TINY, "--grid", "lam=0.1,0.2", "--out", "U"], "not written by sheaf-fmtl"),
    ("reproduce", ["reproduce", "topology", "--quick", "--out", "U", "--quiet"], "not written by sheaf-fmtl"),
    ("link-overwrite", ["run", *TINY, "--out", "L", "--overwrite"], "symbolic link"),
    ("link-resume", ["run", "--resume", "L"], "symbolic link"),
]


@pytest.mark.parametrize("argv, fragment", [pytest.param(a, f, id=i) for i, a, f in REFUSED])
def test_a_folder_of_user_files_is_refused_and_left_as_it_was(owned, capsys, argv, fragment):
    user, outside = owned
    (user.parent / "L").symlink_to(user, target_is_directory=True)
    before, before_outside = folder_snapshot(user, links=True), folder_snapshot(outside, links=True)
    argv = [str(user) if a == "U" else str(user.parent / "L") if a == "L" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error: ") and fragment in err, err
    assert (
        folder_snapshot(user, links=True) == before and folder_snapshot(outside, links=True) == before_outside
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished run, read (never written) by the tests that use it."""
    return _run(tmp_path_factory.mktemp("finished"))


@pytest.mark.slow
def test_plot_and_table_into_a_user_folder_only_add_their_files(owned, finished, capsys):
    user, _ = owned
    run = finished
    before = folder_snapshot(user, links=True)
    assert main(["plot", str(run), "--out", str(user)]) == 0
    assert main(["table", str(run), "--out", str(user), "--name", "mine"]) == 0
    after = folder_snapshot(user, links=True)
    assert {k: after[k] for k in before} == before  # every user file as it was
    assert {"mine.md", "mine.csv", "metric_vs_rounds_and_bits.png"} <= set(after) - set(before)


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", ".hidden", ""])
def test_table_names_stay_inside_out(tmp_path, finished, capsys, name):
    run = finished
    (tmp_path / "tables").mkdir()
    assert main(["table", str(run), "--out", str(tmp_path / "tables"), "--name", name]) == 2
    assert "--name" in capsys.readouterr().err
    assert not list((tmp_path / "tables").iterdir()) and not (tmp_path / "escaped.md").exists()


def test_overwrite_clears_only_what_the_library_wrote(tmp_path, capsys):
    """A marked run folder holding the user's notes and a link out: the new run replaces the old
    run's files; the notes, the link and what it points at stay."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    out = _run(tmp_path)
    (out / "notes.md").write_text("my notes")
    (out / "data").symlink_to(outside, target_is_directory=True)
    (out / "sub").mkdir()
    (out / "sub" / "config.yaml").write_text("mine: 1\n")  # in an unmarked subfolder: the user's
    old = (out / "summary.json").read_bytes()
    assert main(["run", *TINY, "--set", "seed=3", "--out", str(out), "--overwrite"]) == 0
    assert (
        json.loads((out / "summary.json").read_text())["seed"] == 3
        and old != (out / "summary.json").read_bytes()
    )
    assert (out / "notes.md").read_text() == "my notes" and (out / "data").is_symlink()
    assert (outside / "precious.txt").read_text() == "keep" and (out / "sub" / "config.yaml").is_file()


def test_a_link_inside_a_run_folder_is_never_followed(tmp_path):
    """``checkpoints`` replaced by a link to the user's folder: clearing leaves it and its target."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "round-00000001").mkdir()
    (outside / "round-00000001" / "precious").write_text("keep")
    out = _run(tmp_path)
    (out / "checkpoints").symlink_to(outside, target_is_directory=True)
    clear(out)
    assert (out / "checkpoints").is_symlink() and (outside / "round-00000001" / "precious").is_file()
    assert is_marked(out) and not (out / "summary.json").exists()


@pytest.mark.parametrize(
    "bad", [["--set", "data.relatedness=abc"], ["--set", "alpha=1e4", "lam=10", "stability_check=true"]]
)
def test_overwrite_keeps_the_old_run_when_the_new_one_cannot_start(tmp_path, capsys, bad):
    """Refused while building (bad data option, unstable configuration): the old run is intact."""
    out = _run(tmp_path)
    before = folder_snapshot(out, links=True)
    assert main(["run", *TINY, *bad, "--out", str(out), "--overwrite"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert folder_snapshot(out, links=True) == before


def test_a_failed_start_into_a_new_folder_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "new" / "deeper"
    assert main(["run", *TINY, "--set", "data.relatedness=abc", "--out", str(out)]) == 2
    assert not (tmp_path / "new").exists()


# A process that owns a run folder as a run does (marker created if missing, flock held), in plain
# Python: starting it does not import torch.
LOCK_HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(os.path.join(sys.argv[1], ".sheaf-fmtl-run"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def _hold(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held", proc.communicate()
    return proc


@pytest.fixture
def held(tmp_path):
    """A run folder whose lock another live process holds (as a run writing it does)."""
    out = _run(tmp_path, "busy")
    proc = _hold(out)
    yield out
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", *TINY, "--out", "B", "--overwrite"],
        ["run", "--resume", "B"],
        ["run", *TINY, "--seeds", "0", "--out", "B"],
    ],
    ids=["overwrite", "resume", "seeds"],
)
def test_a_folder_in_use_by_a_live_process_is_refused(held, capsys, argv):
    before = folder_snapshot(held, links=True)
    assert main([str(held) if a == "B" else a for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "in use by another sheaf-fmtl process" in err, err
    assert folder_snapshot(held, links=True) == before
    assert main(["run", *TINY, "--out", str(held), "--overwrite"]) == 2  # still held


def test_two_runs_into_one_new_folder_the_second_is_refused(tmp_path, capsys):
    """The first run takes the new folder (marker, lock) before it builds; a second one started
    meanwhile is refused instead of writing over it; once the first is gone (ended or killed: the
    lock goes with the process), the folder, holding only the marker, is an empty run folder."""
    out = tmp_path / "new"
    proc = _hold(out)
    assert main(["run", *TINY, "--out", str(out)]) == 2
    assert "in use by another sheaf-fmtl process" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [MARKER]
    proc.kill()
    proc.wait()
    assert main(["run", *TINY, "--out", str(out)]) == 0


def test_claim_marks_first_and_releases(tmp_path):
    """In one process: the marker is written on entry; a failed block removes the folder it
    created; a finished one keeps it."""
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), claim(out):
        assert (out / MARKER).is_file()
        raise RuntimeError("build failed")
    assert not (tmp_path / "a").exists()
    with claim(out):
        (out / "config.yaml").write_text("x: 1\n")
    assert is_marked(out)


@pytest.mark.parametrize(
    "name, commands",
    [
        ("metrics.csv", ["plot"]),
        ("summary.json", ["plot", "table"]),
        ("config.yaml", ["plot", "table"]),
        ("checkpoint.pt", ["plot"]),
    ],
)
def test_plot_and_table_name_the_file_they_cannot_read(tmp_path, finished, capsys, name, commands):
    run = tmp_path / "damaged"
    shutil.copytree(finished, run)
    (run / name).write_bytes(b"\x00\xff not what a run writes {[")
    for command in commands:
        assert main([command, str(run), "--out", str(tmp_path / "figs")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(run / name) in err, err
