"""Bad input a new user gives, as they give it: each refusal is one line that names the real cause
(not another one), points at a help or a command that applies, and is said before work is done."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run folder of a built-in model."""
    out = tmp_path_factory.mktemp("runs") / "run"
    sheaf_fmtl.run(dataset="synthetic", clients=3, rounds=1, out=out)
    return out


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a plain folder (one client's CSV in it), a folder holding an .npz
    only, and a file."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "client_00.csv").write_text("1,2,0\n3,4,1\n")
    (tmp_path / "npzs").mkdir()
    (tmp_path / "npzs" / "all.npz").write_bytes(b"")
    (tmp_path / "a_file").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _said(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """``(stdout, the one line on stderr)`` of a refused command (exit status 2)."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    return out, lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["bench", "scale", "--clients", "3"],
            "unrecognized arguments: --clients 3 (see sheaf-fmtl bench scale --help)",
        ),
        (["data", "describe", "synthetic", "--bogus"], "(see sheaf-fmtl data describe --help)"),
        (["evaluate", "RUN", "extra"], "unrecognized arguments: extra (see sheaf-fmtl evaluate --help)"),
        (["evaluate", "plain"], "plain is not a run folder (no config.yaml in it)"),
        (["export", "plain", "--out", "exported"], "plain is not a run folder (no config.yaml in it)"),
        (["export", "RUN", "--out", "a_file"], "export folder a_file exists and is a file"),
        (["plot", "missing"], "missing is not a run folder (no such folder)"),
        (["table", "missing"], "missing is not a run folder (no such folder)"),
        (
            ["data", "describe", "file:plain/client_00.csv"],
            "one CSV file is one client's; give the folder holding one CSV per client (file:plain)",
        ),
        (["data", "describe", "file:npzs"], "an .npz holds every client: give it, file:npzs/all.npz"),
        (["run", "--out", "r", "--quiet", "--set", "optimizer=adamw"], "did you mean --set optimizer=AdamW?"),
        (["table", "a_file"], "a_file is not a run folder (a file)"),
        (
            ["data", "describe", "plain"],
            "unknown dataset 'plain'; your own data are named file:PATH (file:plain)",
        ),
        (["data", "describe", "RUN"], "': a run folder, not a dataset"),
        (["run", "--out", "r", "--quiet", "--set", "graph_file=edges.txt"], "got 'edges.txt' (no such file)"),
        (
            ["evaluate", "RUN", "--model", "mynets:cnn"],
            "--model mynets:cnn: the run's model is 'auto', built in",
        ),
        (["export", "RUN", "--out", "e", "--model", "x:y"], "the run's model is 'auto', built in"),
    ],
)
def test_the_refusal_names_the_cause(place, finished, capsys, argv, expected) -> None:
    argv = [str(finished) if a == "RUN" else a for a in argv]
    _, line = _said(argv, capsys)
    assert expected in line, line
    assert not (place / "exported").exists() and not (place / "e").exists() and not (place / "r").exists()


def test_describe_refuses_a_plot_it_cannot_write_before_reading_the_data(place, capsys) -> None:
    out, line = _said(["data", "describe", "synthetic", "--plot", "labels.txt"], capsys)
    assert out == "" and "--plot labels.txt: name a .png, .pdf or .svg file" in line


def test_evaluate_says_at_once_that_a_run_of_python_data_is_scored_in_python(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    data = [
        (rng.normal(size=(20, 3)), rng.integers(0, 2, 20), rng.normal(size=(8, 3)), rng.integers(0, 2, 8))
        for _ in range(3)
    ]

    def make(i: int) -> torch.nn.Module:
        return torch.nn.Linear(3, 2)

    sheaf_fmtl.run(data=data, model=make, rounds=1, out=tmp_path / "run")
    _, line = _said(["evaluate", str(tmp_path / "run"), "--model", "mynets:make"], capsys)
    assert "made from Python objects (dataset), which no file holds" in line
    assert "sheaf_fmtl.load(RUN, model=..., data=...).evaluate()" in line


def test_a_model_given_for_a_built_in_one_is_refused_in_python_too(finished) -> None:
    with pytest.raises(ConfigError, match=r"^model=\.\.\.: the run's model is 'auto', built in"):
        sheaf_fmtl.load(finished, model=lambda i: torch.nn.Linear(5, 2))


@pytest.mark.parametrize("given", [["--set", "validation=0"], ["zero.yaml"]])
def test_a_sweep_given_no_validation_split_is_refused_not_silently_given_one(place, capsys, given) -> None:
    (place / "zero.yaml").write_text("validation: 0\nrounds: 1\n")
    _, line = _said(["sweep", *given, "--grid", "rounds=1", "--out", "sweep"], capsys)
    assert (
        "validation=0: a sweep ranks its cells on a validation split" in line and "--validation 0.2" in line
    )
    assert not (place / "sweep").exists()


@pytest.mark.skipif(
    not Path("/proc/self").is_dir(), reason="needs /proc (Linux), where no folder can be made"
)
def test_a_tensorboard_folder_that_cannot_be_made_is_named_with_its_key(place, capsys) -> None:
    _, line = _said(["run", "--out", "r", "--quiet", "--set", "rounds=1", "log_tensorboard=/proc/tb"], capsys)
    assert (
        "TensorBoardLogger: cannot write /proc/tb (No such file or directory)" in line
        and "'log_tensorboard'" in line
    )
