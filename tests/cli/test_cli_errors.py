"""A catalogue of bad inputs: each ends with exit status 2, one line on stderr
(``sheaf-fmtl: error: ...``, no traceback), and nothing written or overwritten. Then SIGINT /
SIGTERM during a run: stopped after the current round, recorded, exit status 130 / 143."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.engine import simulate
from sheaf_fmtl.runtime.run.folder.folderlock import MARKER
from sheaf_fmtl.runtime.run.stopping.interrupt import StopRequest
from tests.helpers import folder_snapshot, signalling

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
TINY = ["--set", "rounds=2", "eval_every=1", "clients=4", "--quiet"]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A working folder holding the inputs the cases refer to (default outputs would land here)."""
    (tmp_path / "bad_syntax.yaml").write_text("lam: [0.1\n")
    (tmp_path / "tab.yaml").write_text("lam: 0.1\n\talpha: 0.2\n")
    (tmp_path / "dup.yaml").write_text("lam: 0.1\nalpha: 0.2\nlam: 0.3\n")
    (tmp_path / "latin1.yaml").write_bytes("# caf\xe9\nlam: 0.1\n".encode("latin-1"))
    (tmp_path / "list.yaml").write_text("- lam\n- 0.1\n")
    (tmp_path / "unknown.yaml").write_text("lamda: 0.1\n")
    (tmp_path / "data_scalar.yaml").write_text("data: 3\n")
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n2 3\n")
    laughs = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    laughs += [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
    (tmp_path / "laughs.yaml").write_text("\n".join(laughs) + "\n")  # 516 bytes, 9^9 values
    (tmp_path / "deep.yaml").write_text("data: " + "[" * 20000 + "]" * 20000 + "\n")
    x = np.random.default_rng(0).normal(size=(20, 3))
    ys = {"y_0": np.arange(20) % 2, "y_1": np.linspace(0.0, 1.0, 20)}  # int labels, float targets
    np.savez(tmp_path / "mixed.npz", num_clients=2, x_0=x, x_1=x, **ys)
    project = tmp_path / "project"  # a user's folder that holds a config.yaml
    project.mkdir()
    (project / "config.yaml").write_text("lam: 0.1\n")
    (project / "main.py").write_text("print('mine')\n")
    previous = tmp_path / "previous_run"
    previous.mkdir()
    (previous / "checkpoint.pt").write_bytes(b"an earlier run's checkpoint")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _aliases(levels: int = 5, width: int = 10) -> str:
    """A flow mapping of nested aliases standing for ``width ** levels`` values."""
    items = [f"a0: &a0 [{', '.join(['1'] * width)}]"]
    items += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "{" + ", ".join(items) + "}"


ALIASES = _aliases()

# (id, argv, a fragment of the message)
CASES = [
    ("yaml-syntax", ["run", "bad_syntax.yaml"], "bad_syntax.yaml is not valid YAML: line 2"),
    ("yaml-tab", ["run", "tab.yaml"], "tab.yaml is not valid YAML: line 2, column 1"),
    ("yaml-duplicate-key", ["run", "dup.yaml"], "duplicate key 'lam' (first given on line 1)"),
    ("config-not-utf8", ["run", "latin1.yaml"], "latin1.yaml is not UTF-8"),
    ("config-is-folder", ["run", "a_folder"], "a_folder is a folder"),
    ("config-missing", ["run", "missing.yaml"], "missing.yaml does not exist"),
    ("config-not-mapping", ["run", "list.yaml"], "must hold a mapping"),
    ("config-unknown-key", ["run", "unknown.yaml"], "unknown config key 'lamda'"),
    (
        "config-data-scalar",
        ["run", "data_scalar.yaml"],
        "'data' holds the dataset's options, as a mapping (e.g. --set data.",
    ),
    ("set-bad-yaml", ["run", "--set", "lam=[0.1"], "override 'lam=[0.1' is not valid YAML"),
    ("set-no-equals", ["run", "--set", "lam"], "must look like KEY=VALUE"),
    ("set-empty-key", ["run", "--set", "=3"], "must look like KEY=VALUE"),
    (
        "set-subkey-of-scalar",
        ["run", "--set", "lam.x=1"],
        "takes one value, not a mapping: give --set lam=...",
    ),
    ("alpha-nan", ["run", "--set", "alpha=nan"], "'alpha' = nan is not a finite number"),
    ("lam-inf", ["run", "--set", "lam=inf"], "'lam' = inf is not a finite number"),
    ("eta-yaml-inf", ["run", "--set", "eta=.inf"], "'eta' = inf is not a finite number"),
    (
        "graph-file-with-another-graph",
        ["run", "--set", "graph_file=edges.txt", "graph=complete"],
        "add --set graph=file",
    ),
    ("graph-file-missing-name", ["run", "--set", "graph=file"], "'graph_file' must name"),
    ("unknown-key", ["run", "--set", "bogus=3"], "unknown config key 'bogus'"),
    ("int-as-text", ["run", "--set", "rounds=ten"], "'rounds': expected int"),
    ("int-as-float", ["run", "--set", "rounds=1.5"], "'rounds': expected int"),
    ("second-pair-bad", ["run", "--set", "rounds=2", "eval_every=0"], "eval_every >= 1"),
    ("gamma-zero", ["run", "--set", "gamma=0"], "0 < gamma <= 1"),
    ("zero-maps", ["run", "--set", "map_init=zeros"], "never learn"),
    ("device-name", ["run", "--set", "device=gpu"], "allowed: cpu, cuda, cuda:N"),
    ("device-flag-name", ["run", "--device", "tpu"], "allowed: cpu, cuda, cuda:N"),
    ("clients-flag-range", ["run", "--clients", "1"], "clients >= 2"),
    ("clients-flag-type", ["run", "--clients", "abc"], "invalid int value: 'abc'"),
    ("seed-flag-range", ["run", "--seed", "-1"], "seed >= 0"),
    ("unknown-flag", ["run", "--bogus"], "unrecognized arguments: --bogus"),
    ("no-command", [], "required: COMMAND"),
    ("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("out-is-file", ["run", *TINY, "--out", "a_file"], "a_file is an existing file"),
    ("out-under-file", ["run", *TINY, "--out", "a_file/run"], "which is a file"),
    ("out-not-empty", ["run", *TINY, "--out", "previous_run"], "is not empty"),
    ("data-option-type", ["run", *TINY, "--set", "data.relatedness=abc"], "relatedness"),
    ("demo-nan", ["demo", "--set", "alpha=nan"], "not a finite number"),
    ("demo-out-is-file", ["demo", *TINY, "--out", "a_file"], "a_file is an existing file"),
    ("demo-out-not-empty", ["demo", *TINY, "--out", "previous_run"], "is not empty"),
    ("describe-bad-seed", ["data", "describe", "synthetic", "--seed", "-1"], "seed >= 0"),
    ("describe-bad-set", ["data", "describe", "synthetic", "--set", "data.x=[1"], "not valid YAML"),
    ("describe-unknown-dataset", ["data", "describe", "no-such-set"], "no-such-set"),
    ("data-unknown-flag", ["data", "list", "--bogus"], "unrecognized arguments"),
    ("bench-device-name", ["bench", "--device", "gpu"], "allowed: cpu, cuda, cuda:N"),
    ("bench-out-is-file", ["bench", "--smoke", "--out", "a_file"], "a_file is an existing file"),
    ("plot-missing-run", ["plot", "no_such_run"], "no_such_run"),
    ("run-cuda-absent", ["run", *TINY, "--device", "cuda"], "no CUDA device"),
    # bounded: nothing is expanded, listed or echoed without a bound
    ("yaml-aliases", ["run", "laughs.yaml"], "more than 100000 values once its aliases"),
    ("set-aliases", ["run", "--set", f"data={ALIASES}"], "once its aliases"),
    ("yaml-deep", ["run", "deep.yaml"], "nested too deeply"),
    (
        "seeds-range-huge",
        ["run", *TINY, "--seeds", "0-100000000000"],
        "names 100000000001 seeds; at most 1000",
    ),
    ("seeds-list-huge", ["run", *TINY, "--seeds", ",".join(map(str, range(2000)))], "names 2000 seeds"),
    ("grid-values-huge", ["sweep", *TINY, "--grid", "lam=1e-5:1:log100000000"], "asks for 100000000 values"),
    (
        "grid-cells-huge",
        ["sweep", *TINY, "--grid", "lam=1e-5:1:log1000", "--grid", "alpha=0.01:1:lin1000"],
        "1000 x 1000 = 1000000 cells",
    ),
    # checked before any work (processes: before any rank starts)
    (
        "processes-over-clients",
        ["run", *TINY, "--set", "processes=8"],
        "processes = 8 is more than the 4 clients",
    ),
    ("processes-over-dataset", ["run", "--set", "processes=40", "rounds=1"], "more than the 30 clients"),
    (
        "processes-topology",
        ["run", *TINY, "--set", "processes=2", "topology=hybrid-fl"],
        "not supported across processes",
    ),
    (
        "processes-map-draw",
        ["run", *TINY, "--set", "processes=2", "map_draw=device"],
        "map_draw = device is not supported",
    ),
    (
        "processes-timeout",
        ["run", *TINY, "--set", "processes=2", "timeout_s=1e308"],
        "too large for a process group",
    ),
    (
        "stability-nan",
        ["run", *TINY, "--set", "maps=learned", "map_scale=1e25"],
        "not a finite number, so the coupling step",
    ),
    ("mixed-labels", ["run", *TINY, "--set", "dataset=file:mixed.npz"], "mixed label types: client(s) 0"),
    (
        "table-name-up",
        ["table", "previous_run", "--name", "../../x"],
        "give a file name stem without folders",
    ),
    (
        "table-name-abs",
        ["table", "previous_run", "--name", "/tmp/x"],
        "give a file name stem without folders",
    ),
    ("resume-user-folder", ["run", "--resume", "project"], "not a run folder written by sheaf-fmtl"),
    ("overwrite-user-folder", ["run", *TINY, "--out", "project", "--overwrite"], "not written by sheaf-fmtl"),
    ("seeds-overwrite", ["run", *TINY, "--seeds", "0,1", "--overwrite"], "drop --overwrite"),
    ("bench-cuda-absent", ["bench", "--device", "cuda"], "no CUDA device"),
]
PARAMS = [
    pytest.param(*rest, id=name, marks=[NO_CUDA] if "cuda-absent" in name else []) for name, *rest in CASES
]


@pytest.mark.parametrize("argv, fragment", PARAMS)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(sandbox, capsys, argv, fragment):
    before = folder_snapshot(sandbox)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err and len(err.splitlines()) == 1, err
    assert err.startswith("sheaf-fmtl: error: ") and fragment in err, err
    assert folder_snapshot(sandbox) == before  # nothing written, nothing overwritten


def test_catalogue_is_large_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--set", "device=" + "x" * 100_000],
        ["run", "--set", "lam=" + "x" * 100_000],
        ["run", "--set", "x" * 100_000 + "=1"],
        ["run", "--set", "data.relatedness=[" + "1, " * 50_000 + "1]", "rounds=1"],
        ["sweep", "--grid", "lam=" + "x," * 500],
    ],
    ids=["device", "lam", "key", "data-list", "grid"],
)
def test_an_error_echoes_a_bounded_part_of_the_value(sandbox, capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sheaf-fmtl: error: ") and len(err.splitlines()) == 1 and len(err) < 2100, err[:300]


def test_divergence_names_the_keys_the_algorithm_reads(sandbox, capsys):
    """pFedMe with a huge inner step size: the message names inner_lr (not sheaf-fmtl's eta)."""
    argv = ["run", *TINY, "--set", "dataset=synthetic", "algorithm=pfedme", "inner_lr=1e6", "rounds=10"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "try smaller step sizes or scales (inner_lr=1e+06, alpha=0.05" in err and " eta=" not in err, err


def test_warnings_go_to_stderr(sandbox, capsys, monkeypatch):
    monkeypatch.setattr(simulate.Simulation, "diagnose", lambda self: ["a note for the user"])
    assert main(["run", *TINY, "--out", "warned"]) == 0
    captured = capsys.readouterr()
    assert "sheaf-fmtl: warning: a note for the user" in captured.err and "a note" not in captured.out


def test_overwrite_clears_an_earlier_run_so_no_stale_file_survives(sandbox, capsys):
    out = sandbox / "previous_run"
    (out / MARKER).write_text("")  # a run folder sheaf-fmtl wrote ...
    (out / "notes.txt").write_text("the user's own notes")  # ... where the user kept a file
    assert (
        main(
            [
                "run",
                *TINY,
                "--set",
                "alpha=1e4",
                "stability_check=false",
                "maps=learned",
                "local_epochs=0",
                "--out",
                str(out),
                "--overwrite",
            ]
        )
        == 1
    )  # diverges: no checkpoint of its own
    assert "NaN" in capsys.readouterr().err
    # no checkpoint.pt of its own; the resumable checkpoint of round 1 stays
    kept = [
        MARKER,
        "checkpoints",
        "config.yaml",
        "metrics.csv",
        "notes.txt",
        "preprocessing.json",
        "summary.json",
    ]
    assert sorted(p.name for p in out.iterdir()) == kept
    assert json.loads((out / "summary.json").read_text())["status"] == "diverged"


def test_stop_request_records_the_signal_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_signal_mid_run_stops_after_the_round_and_records_it(sandbox, monkeypatch, capsys):
    """In process: the 3rd round sends SIGTERM to this process; the run records 3 rounds."""
    monkeypatch.setattr(simulate.Simulation, "step", signalling(simulate.Simulation.step, 3))
    out = sandbox / "stopped"
    code = main(["run", "--set", "rounds=50", "eval_every=10", "clients=4", "--quiet", "--out", str(out)])
    assert code == 143
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stopped by SIGTERM after round 3 of 50" in err
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["rounds_done"] == 3 and s["signal"] == "SIGTERM"
    assert s["final"] is not None and len(s["per_client"]) == 4
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(r["round"]) for r in rows] == [0, 3]
    assert (out / "checkpoint.pt").is_file()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


@pytest.mark.slow  # a fresh interpreter imports torch: 5-15 s (the in-process test above is fast)
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_a_cli_process(tmp_path, sig, status):
    """A real ``sheaf-fmtl run`` process, signalled once its round loop runs."""
    out = tmp_path / "run"
    code = (
        "import sys; from sheaf_fmtl.cli import main; "
        f"sys.exit(main(['run', '--set', 'rounds=1000000', 'eval_every=100000', 'clients=4', "
        f"'--quiet', '--out', {str(out)!r}]))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not _has_rows(out / "metrics.csv", 1):  # round 0 evaluated: the loop is running
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert f"stopped by {signal.Signals(sig).name}" in stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["rounds_done"] >= 1
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert int(rows[-1]["round"]) == s["rounds_done"] and (out / "checkpoint.pt").is_file()


def _has_rows(path: Path, n: int) -> bool:
    return path.is_file() and len(path.read_text().splitlines()) > n
