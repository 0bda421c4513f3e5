"""Every file a command reads whole has a size bound before it is read: a received run folder whose
``config.yaml``, ``summary.json``, ``preprocessing.json``, ``metrics.csv``, checkpoint manifest,
marker or ledger is a link to ``/dev/zero``, a FIFO or a (sparse) file of gigabytes is refused in one
line, at once and without reading it; a config file too. A config through a pipe still reads."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, read_config_file
from sheaf_fmtl.data.bounded import LARGE, SMALL, UnboundedFile, read_bounded
from sheaf_fmtl.runtime.run.folder.ledger import owned_names
from sheaf_fmtl.runtime.run.folder.rundir import marker_kind
from tests.helpers import error_line

SETS = ["--set", "clients=4", "--set", "rounds=2", "--set", "eval_every=1", "--set", "batch_size=4"]
HOSTILE = ["zero", "fifo", "huge"]


@pytest.fixture(autouse=True)
def _no_hang():
    """A read that blocks (a FIFO with no writer) fails the test instead of hanging the suite."""
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("a read blocked"))
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _hostile(path: Path, kind: str, size: int = SMALL) -> None:
    path.unlink(missing_ok=True)
    if kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:  # sparse: no disk used, but larger than the bound
            f.truncate(size + 1)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("f") / "run"
    assert main(["run", *SETS, "--quiet", "--out", str(run)]) == 0
    return run


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize(
    "name, argv",
    [
        ("summary.json", ["export", "{run}", "--out", "{tmp}/m", "--no-programs"]),
        ("config.yaml", ["export", "{run}", "--out", "{tmp}/m", "--no-programs"]),
        ("preprocessing.json", ["export", "{run}", "--out", "{tmp}/m", "--no-programs"]),
        ("metrics.csv", ["plot", "{run}", "--out", "{tmp}/p"]),
        ("summary.json", ["table", "{run}", "--out", "{tmp}/t"]),
        ("config.yaml", ["run", "--resume", "{run}", "--quiet"]),
    ],
)
def test_a_hostile_file_in_a_received_folder_is_refused_unread(finished, tmp_path, capsys, kind, name, argv):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    size = LARGE if name in ("metrics.csv", "preprocessing.json") else SMALL
    _hostile(run / name, kind, size)
    code = main([a.format(run=run, tmp=tmp_path) for a in argv])
    assert code in (1, 2)
    err = error_line(capsys)
    assert name in err, err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_config_file_is_one_line(tmp_path, capsys, kind):
    path = tmp_path / "c.yaml"
    if kind == "fifo":
        pytest.skip("a FIFO given as the config is read as a pipe (see the next test)")
    _hostile(path, kind)
    with pytest.raises(ConfigError, match=rf"config file {path} holds (more than the )?\d+"):
        read_config_file(path)


def test_a_config_through_a_pipe_reads(tmp_path):
    r, w = os.pipe()
    os.write(w, b"rounds: 3\nseed: 10\n")
    os.close(w)
    try:
        assert read_config_file(f"/proc/self/fd/{r}") == {"rounds": 3, "seed": 10}
    finally:
        os.close(r)


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_marker_or_ledger_reads_as_none(tmp_path, kind):
    folder = tmp_path / "f"
    folder.mkdir()
    _hostile(folder / ".sheaf-fmtl-owned", kind)
    assert owned_names(folder) == set()
    (folder / ".sheaf-fmtl-run").write_text("x" * (SMALL + 1))
    assert marker_kind(folder) is None


@pytest.mark.parametrize("kind", HOSTILE)
def test_read_bounded_never_reads_past_its_bound(tmp_path, kind):
    path = tmp_path / "x"
    _hostile(path, kind, 1000)
    with pytest.raises(UnboundedFile, match="not read"):
        read_bounded(path, 1000)
    (tmp_path / "ok").write_bytes(b"a" * 1000)
    assert read_bounded(tmp_path / "ok", 1000) == b"a" * 1000


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_client_csv_is_refused_unread(tmp_path, capsys, kind):
    """A folder of client CSVs (``dataset=file:FOLDER``) one of which is a link to ``/dev/zero``, a
    FIFO or a sparse file past the bound: one line naming the file (and its size and the bound)."""
    from sheaf_fmtl.data.files import CSV_LIMIT

    folder = tmp_path / "csvs"
    folder.mkdir()
    for i in (0, 2):
        (folder / f"client_{i}.csv").write_text("a,b,y\n0.5,1.0,0\n1.5,0.2,1\n0.1,0.3,1\n")
    _hostile(folder / "client_1.csv", kind, CSV_LIMIT)
    argv = ["run", "--quiet", "--set", f"dataset=file:{folder}", "rounds=1", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = error_line(capsys)
    assert "client CSV" in err and str(folder / "client_1.csv") in err and "not read" in err, err
    if kind == "huge":
        assert f"holds {CSV_LIMIT + 1} bytes, more than the {CSV_LIMIT}" in err and ".npz" in err
    else:
        assert "not a regular file" in err


def test_a_silos_own_hostile_client_csv_is_refused_unread(tmp_path):
    """A silo's folder (only its clients' files, named by id): its own /dev/zero link, refused."""
    from sheaf_fmtl.data.base import DataRequest, DatasetError
    from sheaf_fmtl.data.user import load_user

    (tmp_path / "client_0.csv").write_text("0.5,1.0,0\n1.5,0.2,1\n")
    _hostile(tmp_path / "client_2.csv", "zero")
    with pytest.raises(DatasetError, match=r"client CSV .*client_2\.csv is not a regular file") as err:
        load_user(str(tmp_path), DataRequest(clients=4, held=(0, 2)))
    assert "\n" not in str(err.value)
    assert len(load_user(str(tmp_path), DataRequest(clients=4, held=(0,))).clients) == 1
