"""A run folder is data: ``run --resume``, ``plot`` and ``table`` never import the code its
``config.yaml`` names unless the user names the same plug-in again (or passes ``--trust-plugins``),
nor a module shipped in the folder; and no file the library writes is written through a link."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.launching.resume import resume
from tests.helpers import folder_snapshot, signalling

TINY = ["--set", "rounds=2", "eval_every=1", "clients=4", "--quiet"]
#: A module whose import leaves a file (the proof that it ran) and that names a model factory.
HOSTILE = """
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text("the folder's code ran")


def make(i, input_shape, num_outputs):
    import torch
    return torch.nn.Linear(input_shape[0], num_outputs)
"""


@pytest.fixture
def sent(tmp_path, monkeypatch):
    """A stopped run folder someone sent: its ``config.yaml`` names ``hostile_mod:make``, a module
    shipped inside the folder. Yields the folder; the working folder is ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    lib, out = tmp_path / "lib", tmp_path / "sent"
    lib.mkdir()
    (lib / "hostile_mod.py").write_text(HOSTILE)
    sys.path.insert(0, str(lib))  # where the sender had it
    try:
        argv = ["run", "--set", "rounds=50", "eval_every=1", "clients=4", "model=hostile_mod:make", "--quiet"]
        assert _stopped_run([*argv, "--out", str(out)], at=2) == 143
    finally:
        sys.path.remove(str(lib))
        sys.modules.pop("hostile_mod", None)
    (out / "hostile_mod.py").write_text(HOSTILE)
    (lib / "IMPORTED").unlink()
    yield out
    sys.modules.pop("hostile_mod", None)


def _stopped_run(argv: list[str], at: int) -> int:
    """``main(argv)`` with a SIGTERM to this process after round ``at``."""
    from sheaf_fmtl.runtime.engine import simulate

    step = simulate.Simulation.step
    simulate.Simulation.step = signalling(step, at)  # type: ignore[method-assign]
    try:
        return main(argv)
    finally:
        simulate.Simulation.step = step  # type: ignore[method-assign]


@pytest.mark.parametrize("where", ["elsewhere", "inside"])
def test_resume_of_a_folder_naming_code_imports_nothing(sent, capsys, monkeypatch, where):
    """From another folder, and ``cd DIR && --resume .`` (the module is in the working folder)."""
    if where == "inside":
        monkeypatch.chdir(sent)
    target = "." if where == "inside" else str(sent)
    before = folder_snapshot(sent)
    assert main(["run", "--resume", target, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "never runs its own code" in err and "--trust-plugins" in err, err
    assert "model = hostile_mod:make" in err
    assert not (sent / "IMPORTED").exists() and "hostile_mod" not in sys.modules
    assert folder_snapshot(sent) == before
    with pytest.raises(ValueError, match="never runs its own code") as refused:  # the Python API
        sheaf_fmtl.run(resume=target)
    said = str(refused.value)  # the keywords of sheaf_fmtl.run(resume=...), no flag
    assert "name it again (model='hostile_mod:make') or pass trust_plugins=True" in said and "--" not in said
    assert folder_snapshot(sent) == before


def test_python_resume_imports_nothing_either(sent):
    with pytest.raises(ValueError, match="never runs its own code"):
        resume(sent)
    assert not (sent / "IMPORTED").exists()


@pytest.mark.slow
def test_plot_and_table_of_such_a_folder_import_nothing(sent, tmp_path, capsys):
    assert main(["plot", str(sent), "--out", str(tmp_path / "figs")]) == 0
    assert main(["table", str(sent), "--out", str(tmp_path / "tables")]) == 0
    assert not (sent / "IMPORTED").exists() and "hostile_mod" not in sys.modules


@pytest.mark.parametrize("how", [["--set", "model=hostile_mod:make"], ["--trust-plugins"]])
def test_named_again_or_trusted_it_is_imported_and_resumed(sent, capsys, monkeypatch, how):
    """The user's explicit word imports it (the oracle that the refusal above is the gate's)."""
    monkeypatch.syspath_prepend(str(sent))
    assert main(["run", "--resume", str(sent), "--quiet", *how]) == 0
    assert (sent / "IMPORTED").exists()
    assert json.loads((sent / "summary.json").read_text())["status"] == "ok"


def test_an_edited_config_is_refused_before_anything_is_imported(sent, capsys, monkeypatch):
    cfg = yaml.safe_load((sent / "config.yaml").read_text())
    (sent / "config.yaml").write_text(yaml.safe_dump({**cfg, "lam": 0.123}, sort_keys=False))
    monkeypatch.syspath_prepend(str(sent))
    assert main(["run", "--resume", str(sent), "--quiet", "--trust-plugins"]) == 2
    err = capsys.readouterr().err
    assert "differs from the config its checkpoint was written with (key 'lam')" in err, err
    assert not (sent / "IMPORTED").exists()


def test_trust_plugins_without_resume_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *TINY, "--trust-plugins", "--out", "r"]) == 2
    assert "--trust-plugins applies to --resume" in capsys.readouterr().err and not Path("r").exists()


NAMES = ["config.yaml", "metrics.csv", "summary.json", "checkpoint.pt"]


def test_overwrite_replaces_links_in_the_folder_never_writes_through_them(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in NAMES:
        (outside / name).write_text(f"the user's {name}")
    (outside / "dir").mkdir()
    (outside / "dir" / "precious").write_text("keep")
    out = tmp_path / "run"
    assert main(["run", *TINY, "--out", str(out)]) == 0
    for name in NAMES:
        (out / name).unlink()
        (out / name).symlink_to(outside / name)
    (out / "checkpoints").symlink_to(outside / "dir", target_is_directory=True)
    before = folder_snapshot(outside)
    argv = ["run", "--set", "rounds=4", "eval_every=1", "checkpoint_every=1", "clients=4", "--quiet"]
    assert main([*argv, "--out", str(out), "--overwrite"]) == 0
    assert folder_snapshot(outside) == before  # nothing written through a link
    for name in NAMES:
        assert (out / name).is_file() and not (out / name).is_symlink(), name
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
    assert not (out / "checkpoints").is_symlink()


@pytest.mark.slow
def test_plot_replaces_a_link_named_like_its_figure(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", *TINY, "--out", str(out)]) == 0
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"the user's picture")
    (out / "metric_vs_rounds_and_bits.png").symlink_to(victim)
    assert main(["plot", str(out)]) == 0
    assert victim.read_bytes() == b"the user's picture"
    fig = out / "metric_vs_rounds_and_bits.png"
    assert fig.is_file() and not fig.is_symlink() and fig.read_bytes()[:4] == b"\x89PNG"


def test_resume_refuses_a_checkpoints_link(sent, tmp_path, capsys):
    os.rename(sent / "checkpoints", tmp_path / "elsewhere")
    (sent / "checkpoints").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert main(["run", "--resume", str(sent), "--quiet"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err


def test_python_run_resumes_when_the_plug_in_is_named_again(sent, monkeypatch):
    import sheaf_fmtl

    monkeypatch.syspath_prepend(str(sent))
    result = sheaf_fmtl.run(resume=sent, model="hostile_mod:make")
    assert result.summary["status"] == "ok" and (sent / "IMPORTED").exists()


#: A scheduler module whose import leaves a file (the proof that it ran).
EVIL = """
import pathlib

import torch

pathlib.Path(__file__).with_name("IMPORTED").write_text("the folder's code ran")


class Sched(torch.optim.lr_scheduler.StepLR):
    def __init__(self, optimizer, step_size=10, gamma=0.5):
        super().__init__(optimizer, step_size=step_size, gamma=gamma)
"""


@pytest.fixture
def scheduled(tmp_path, monkeypatch):
    """A stopped run folder whose ``config.yaml`` names ``lr_scheduler: evil:Sched``, a module in
    the working folder (``tmp_path``, also on the Python path). Yields the folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "evil.py").write_text(EVIL)
    out = tmp_path / "sent"
    argv = ["run", "--set", "rounds=4", "eval_every=1", "clients=4", "lr_scheduler=evil:Sched", "--quiet"]
    try:
        assert _stopped_run([*argv, "--out", str(out)], at=2) == 143
    finally:
        sys.modules.pop("evil", None)
    (tmp_path / "IMPORTED").unlink()
    yield out
    sys.modules.pop("evil", None)


def test_resume_never_imports_a_scheduler_its_folder_names(scheduled, tmp_path, capsys):
    """The config's integrity is checked without importing the ``module:Class`` it names."""
    assert main(["run", "--resume", str(scheduled), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lr_scheduler = evil:Sched" in err, err
    assert "--set lr_scheduler=evil:Sched" in err and "--trust-plugins" in err, err
    assert not (tmp_path / "IMPORTED").exists() and "evil" not in sys.modules
    with pytest.raises(ValueError, match="never runs its own code") as refused:  # the Python API
        sheaf_fmtl.run(resume=scheduled)
    assert "lr_scheduler='evil:Sched'" in str(refused.value)
    assert not (tmp_path / "IMPORTED").exists() and "evil" not in sys.modules


def test_a_scheduler_named_again_is_imported_and_resumed(scheduled, tmp_path, capsys):
    assert main(["run", "--resume", str(scheduled), "--quiet", "--set", "lr_scheduler=evil:Sched"]) == 0
    assert (tmp_path / "IMPORTED").exists()
    assert json.loads((scheduled / "summary.json").read_text())["status"] == "ok"


def test_a_torch_scheduler_by_name_is_resumed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--set", "rounds=4", "eval_every=1", "clients=4", "lr_scheduler=StepLR"]
    argv += ["lr_scheduler_args.step_size=5", "--quiet", "--out", "r"]
    assert _stopped_run(argv, at=2) == 143
    assert main(["run", "--resume", "r", "--quiet"]) == 0
    assert json.loads(Path("r/summary.json").read_text())["status"] == "ok"


def test_an_edited_config_naming_a_scheduler_is_refused_before_it_is_imported(scheduled, tmp_path, capsys):
    """Even trusted, the digest of an edited ``config.yaml`` is checked without importing its code."""
    cfg = yaml.safe_load((scheduled / "config.yaml").read_text())
    (scheduled / "config.yaml").write_text(yaml.safe_dump({**cfg, "lam": 0.123}, sort_keys=False))
    assert main(["run", "--resume", str(scheduled), "--quiet", "--trust-plugins"]) == 2
    assert "(key 'lam')" in capsys.readouterr().err
    assert not (tmp_path / "IMPORTED").exists() and "evil" not in sys.modules
