"""A write that fails for lack of room (here a file size limit, ``RLIMIT_FSIZE``, which fails writes
as a full disk does) ends ``export`` and a run in one line, never in torch's ``[enforce fail ...]``
or an aborted interpreter, and leaves no temporary file or folder: the export's ``torch.export``
programs, its state_dicts, a run's checkpoints, its final state and its best round alike."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from tests.helpers import folder_snapshot

SETS = ["--set", "clients=4", "--set", "rounds=2", "--set", "eval_every=1", "--set", "batch_size=4"]
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _limited(argv: list[str], limit: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "sheaf_fmtl.cli", *argv],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("w") / "run"
    assert main(["run", *SETS, "--quiet", "--out", str(run)]) == 0
    return run


@pytest.mark.parametrize("limit, programs", [(8 * 1024, True), (1024, False)])
@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_export_past_a_write_limit_is_one_line_and_leaves_nothing(finished, tmp_path, limit, programs):
    before = folder_snapshot(finished, folders=False)
    argv = ["export", str(finished), "--out", str(tmp_path / "m"), *([] if programs else ["--no-programs"])]
    done = _limited(argv, limit, tmp_path)
    err = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, err[-500:])
    assert len(err.splitlines()) == 1 and "export to" in err and "nothing of it was kept" in err, err
    assert "enforce fail" not in err and sorted(p.name for p in tmp_path.iterdir()) == [], list(
        tmp_path.iterdir()
    )
    assert folder_snapshot(finished, folders=False) == before


@pytest.mark.parametrize(
    "limit, more",
    [(2 * 1024, []), (4 * 1024, ["--set", "early_stop_patience=50", "--set", "validation=0.3"])],
)
def test_a_run_past_a_write_limit_is_one_line_and_leaves_no_temporary_file(tmp_path, limit, more):
    out = tmp_path / "r"
    done = _limited(["run", *SETS, *more, "--quiet", "--out", str(out)], limit, tmp_path)
    err = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, err[-500:])
    assert len(err.splitlines()) == 1 and "file size limit" in err and "every file whole" in err, err
    assert "enforce fail" not in err
    left = [p.name for p in out.rglob("*") if ".tmp" in p.name]
    assert left == [], left
