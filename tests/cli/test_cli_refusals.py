"""More of the bad-input catalogue (as in ``test_cli_errors``): each case ends with exit status 2,
one line on stderr (``sheaf-fmtl: error: ...``, no traceback), and nothing written or overwritten."""

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
from sheaf_fmtl.config import ConfigError, load_config
from tests.helpers import folder_snapshot

from .test_cli_errors import TINY, sandbox  # noqa: F401 - the catalogue's working folder


@pytest.fixture
def inputs(sandbox):  # noqa: F811
    """The catalogue's folder with this file's inputs."""
    (sandbox / "recursive_list.yaml").write_text("rounds: &a [*a]\n")
    (sandbox / "recursive_map.yaml").write_text("data: &a {x: *a}\n")
    (sandbox / "text.npz").write_text("round,loss\n0,1.0\n")  # a text file named .npz
    x = np.zeros((10, 3))
    np.savez(
        sandbox / "fraction.npz", num_clients=2.7, x_0=x, y_0=np.arange(10) % 2, x_1=x, y_1=np.arange(10) % 2
    )
    return sandbox


# (id, argv, a fragment of the message)
CASES = [
    ("yaml-recursive-list", ["run", "recursive_list.yaml"], "line 1 contains itself through an alias"),
    ("yaml-recursive-map", ["run", "recursive_map.yaml"], "line 1 contains itself through an alias"),
    ("set-recursive-map", ["run", "--set", "data=&a {x: *a}"], "contains itself through an alias"),
    ("set-recursive-nested", ["run", "--set", "data=&a {x: [1, {y: *a}]}"], "contains itself"),
    ("file-not-npz", ["run", *TINY, "--set", "dataset=file:text.npz"], "text.npz: not an .npz file"),
    (
        "npz-num-clients-fraction",
        ["run", *TINY, "--set", "dataset=file:fraction.npz"],
        "num_clients = 2.7 is not a whole number",
    ),
    ("grid-negative-count", ["sweep", *TINY, "--grid", "lam=1:2:log-3"], "log-3 asks for -3 values"),
    ("grid-zero-count", ["sweep", *TINY, "--grid", "lam=1:2:lin0"], "lin0 asks for 0 values"),
    ("bench-threads-zero", ["bench", "--smoke", "--threads", "0", "--out", "bench_out"], "--threads 0"),
    ("int-key-in-sci-notation", ["run", "--set", "rounds=1e3"], "'rounds': expected int, got float"),
]


@pytest.mark.parametrize("argv, fragment", [pytest.param(*rest, id=name) for name, *rest in CASES])
def test_refused_at_once_in_one_line_and_nothing_written(inputs, capsys, argv, fragment):
    before = folder_snapshot(inputs)
    t0 = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - t0 < 10  # at once (a recursive alias used to hang or exhaust memory)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err and len(err.splitlines()) == 1, err
    assert err.startswith("sheaf-fmtl: error: ") and fragment in err, err
    assert folder_snapshot(inputs) == before


def test_an_alias_used_twice_is_no_cycle():
    """The oracle for the cycle check: a shared (not self-containing) anchor still reads."""
    from sheaf_fmtl.config import parse_yaml

    assert parse_yaml("a: &x [1, {k: 2}]\nb: [*x, *x]\n", "f") == {
        "a": [1, {"k": 2}],
        "b": [[1, {"k": 2}], [1, {"k": 2}]],
    }


def test_scientific_notation_reads_as_numbers(tmp_path):
    """YAML 1.1 (PyYAML) reads ``1e-3`` as text; a config reads it as the number, in a file and
    through ``--set`` (the oracle: the same values written with a dot)."""
    (tmp_path / "c.yaml").write_text("alpha: 1e-3\nlam: 5E-1\ntimeout_s: 1e3\n")
    config = load_config(tmp_path / "c.yaml", ["eta=2e-1"])
    same = load_config(None, ["alpha=0.001", "lam=0.5", "timeout_s=1000.0", "eta=0.2"])
    assert config == same and isinstance(config.alpha, float)
    with pytest.raises(ConfigError, match="not a finite number"):
        load_config(None, ["lam=1e400"])  # inf, refused as such (never "got str")


def test_stray_rank_variables_are_named_as_taken_for_torchruns(sandbox, capsys, monkeypatch):  # noqa: F811
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for name in ("MASTER_ADDR", "MASTER_PORT", "SHEAF_FMTL_STORE_FILE"):
        monkeypatch.delenv(name, raising=False)
    before = folder_snapshot(sandbox)
    assert main(["run", *TINY, "--out", "r"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1 and "RANK=0 and WORLD_SIZE=2" in err and "taken for torchrun's" in err
    ), err
    assert "MASTER_ADDR and MASTER_PORT are not set" in err and folder_snapshot(sandbox) == before


def test_plot_out_an_existing_file_and_table_of_a_damaged_summary(sandbox, capsys):  # noqa: F811
    assert main(["run", *TINY, "--out", "done"]) == 0
    capsys.readouterr()
    assert main(["plot", "done", "--out", "a_file"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "sheaf-fmtl: error: plot --out a_file is an existing file; give a folder for the figures", (
        err
    )
    summary = json.loads((sandbox / "done" / "summary.json").read_text())
    (sandbox / "done" / "summary.json").write_text(json.dumps({**summary, "final": "abc"}))
    assert main(["table", "done", "--out", "tables"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "done/summary.json: 'final' is not a number" in err, err
    assert not (sandbox / "tables").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see the start-up")
def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path):
    """SIGINT while ``python -m sheaf_fmtl`` still imports (torch): one line, exit 130."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(tmp_path / "r")],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # (a background job ignores it)
    )
    maps, deadline = Path(f"/proc/{proc.pid}/maps"), time.monotonic() + 60
    while "torch" not in (maps.read_text() if maps.exists() else ""):  # the package imports torch
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
