"""``checkpoint.pt`` is read only as far as ``summary.json`` vouches for it: ``load``, ``export`` and
``plot`` refuse, in one line naming the file and writing nothing, a final state that was altered,
swapped for another run's or is not recorded; ``load`` and ``export`` refuse a run that did not
finish (its final state is not the trained models)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.data.base import DatasetError
from sheaf_fmtl.metrics.final import file_digest
from sheaf_fmtl.runtime.engine import simulate
from tests.helpers import folder_snapshot, signalling

ARGV = ["--quiet", "--set", "clients=4", "rounds=4", "eval_every=2", "batch_size=4"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("final")
    for name, seed in (("a", 0), ("b", 1)):
        assert main(["run", *ARGV, f"seed={seed}", "--out", str(root / name)]) == 0
    return root


def _summary(run: Path, **change: object) -> None:
    body = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**body, **change}))


def _strip_record(run: Path) -> None:
    body = json.loads((run / "summary.json").read_text())
    del body["checkpoint"]
    (run / "summary.json").write_text(json.dumps(body))


DAMAGE = {
    "altered": (lambda r, o: _flip(r / "checkpoint.pt"), "differs from the size and SHA-256"),
    "another-runs": (
        lambda r, o: shutil.copyfile(o / "checkpoint.pt", r / "checkpoint.pt"),
        "differs from the size and SHA-256",
    ),
    "not-recorded": (lambda r, o: _strip_record(r), "is not vouched for"),
    "record-of-another": (
        lambda r, o: _summary(r, checkpoint=file_digest(o / "checkpoint.pt")),
        "differs from the size and SHA-256",
    ),
    "missing": (lambda r, o: (r / "checkpoint.pt").unlink(), "checkpoint.pt is missing"),
}


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_finished_run_records_its_final_state(finished):
    run = finished / "a"
    record = json.loads((run / "summary.json").read_text())["checkpoint"]
    data = (run / "checkpoint.pt").read_bytes()
    assert record == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert sheaf_fmtl.load(run).num_clients == 4  # (the untouched folder loads)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_an_unvouched_final_state_is_refused_by_every_reader(finished, tmp_path, capsys, case):
    run = tmp_path / "run"
    shutil.copytree(finished / "a", run)
    damage, fragment = DAMAGE[case]
    damage(run, finished / "b")
    before = folder_snapshot(run, folders=False)
    with pytest.raises(DatasetError, match=fragment):
        sheaf_fmtl.load(run)
    for argv in (
        ["export", str(run), "--out", str(tmp_path / "exp")],
        ["plot", str(run), "--out", str(tmp_path / "figs")],
    ):
        if argv[0] == "plot" and case == "missing":
            continue  # (a run without a final state plots its curves)
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and fragment in err and str(run) in err, err
    assert not (tmp_path / "exp").exists()
    assert not any(p.name.startswith("map_norms") for p in (tmp_path / "figs").glob("*"))
    assert folder_snapshot(run, folders=False) == before


def test_an_interrupted_run_is_not_exported_as_if_finished(tmp_path, monkeypatch, capsys):
    step = simulate.Simulation.step
    monkeypatch.setattr(simulate.Simulation, "step", signalling(step, 2))
    run = tmp_path / "part"
    assert main(["run", *ARGV, "--out", str(run)]) == 143
    monkeypatch.setattr(simulate.Simulation, "step", step)
    capsys.readouterr()
    assert (run / "checkpoint.pt").is_file()  # the state at the stop, which is not the trained models
    before = folder_snapshot(run, folders=False)
    with pytest.raises(DatasetError, match=r"did not finish \(status 'interrupted' at round 2 of 4\)"):
        sheaf_fmtl.load(run)
    assert main(["export", str(run), "--out", str(tmp_path / "exp")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "status 'interrupted'" in err and "resume" in err, err
    assert not (tmp_path / "exp").exists() and folder_snapshot(run, folders=False) == before
    assert main(["run", "--resume", str(run), "--quiet"]) == 0  # resumed, it exports
    assert main(["export", str(run), "--out", str(tmp_path / "exp")]) == 0
    assert torch.load(tmp_path / "exp" / "client-00000.pt", weights_only=True)


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), RuntimeError("writer failed")])
def test_an_export_cut_short_by_a_full_disk_leaves_nothing(finished, tmp_path, monkeypatch, capsys, error):
    import sheaf_fmtl.export as export_module

    save, calls = torch.save, [0]

    def save_then_fail(obj, f):  # noqa: ANN001, ANN202 - the second client's file fills the disk
        calls[0] += 1
        if calls[0] == 2:
            f.write(b"part of a file")
            raise error
        return save(obj, f)

    monkeypatch.setattr(export_module.torch, "save", save_then_fail)
    before = folder_snapshot(finished / "a", folders=False)
    assert main(["export", str(finished / "a"), "--out", str(tmp_path / "exp"), "--no-programs"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"export to {tmp_path / 'exp'} failed" in err, err
    assert str(error.args[-1]) in err and "nothing of it was kept" in err
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one
    assert folder_snapshot(finished / "a", folders=False) == before
