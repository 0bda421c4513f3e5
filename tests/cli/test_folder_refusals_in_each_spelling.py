"""A refusal of a run folder reaches the command line and ``sheaf_fmtl.run`` as one line in the same
words, naming the way out in its reader's spelling (``--out`` / ``out=...``, ``--overwrite`` /
``overwrite=True``): a Python user is never pointed at a flag; every name a hint gives exists."""

from __future__ import annotations

from pathlib import Path

import pytest

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder.folderlock import FolderError
from sheaf_fmtl.runtime.run.folder.rundir import mark

KEYS = {"clients": 4, "rounds": 1, "batch_size": 4}
SETS = [a for k, v in KEYS.items() for a in ("--set", f"{k}={v}")]


def _file(tmp: Path) -> Path:
    (tmp / "f").write_text("mine")
    return tmp / "f"


def _under_a_file(tmp: Path) -> Path:
    return _file(tmp) / "run"


def _users_folder(tmp: Path) -> Path:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("mine")
    return tmp / "mine"


def _earlier_run(tmp: Path) -> Path:
    out = mark(tmp / "old")
    (out / "summary.json").write_text("{}")
    return out


@pytest.mark.parametrize(
    "make, ways",
    [
        (_file, [("out=...", "--out")]),
        (_under_a_file, [("out=...", "--out")]),
        (_users_folder, [("out=...", "--out"), ("overwrite=True", "--overwrite")]),
        (_earlier_run, [("out=...", "--out"), ("overwrite=True", "--overwrite")]),
    ],
)
def test_a_folder_refusal_is_one_line_in_each_spelling(tmp_path, capsys, make, ways):
    out = make(tmp_path)
    with pytest.raises(FolderError) as refused:
        sheaf_fmtl.run(out=out, **KEYS)
    said = str(refused.value)
    assert all(python in said for python, _ in ways) and "--" not in said, said
    assert main(["run", *SETS, "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    spelled = said
    for python, flag in ways:
        spelled = spelled.replace(python, flag)
    assert err == f"sheaf-fmtl: error: {spelled}", (err, said)


def test_every_python_name_a_hint_gives_exists():
    assert callable(sheaf_fmtl.load) and callable(sheaf_fmtl.run)
    import inspect

    assert {"out", "overwrite", "resume", "trust_plugins"} <= set(
        inspect.signature(sheaf_fmtl.run).parameters
    )
    assert "model" in inspect.signature(sheaf_fmtl.load).parameters
