"""A resume trusts a checkpoint only as far as it vouches for itself: an edited ``config.yaml``, a
manifest that is corrupt, partial or names a path outside its folder, a shard cut short or altered
are each refused in one line naming the file, exit status 2, nothing in the folder changed; a later
checkpoint cut short is passed over, and the resume says so."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.engine import simulate
from sheaf_fmtl.runtime.run.checkpoints.checkpoint import MANIFEST
from sheaf_fmtl.runtime.run.checkpoints.checkpoint_read import latest_checkpoint
from tests.helpers import folder_snapshot, signalling

ARGV = [
    "--set",
    "rounds=6",
    "eval_every=2",
    "checkpoint_every=1",
    "clients=4",
    "batch_size=4",
    "lam=0.01",  # config.yaml records it; a test edits it
    "--quiet",
]


@pytest.fixture
def stopped(tmp_path, monkeypatch, capsys):
    """A run stopped by SIGTERM after round 3 (checkpoints every round: round 3's kept)."""
    step = simulate.Simulation.step
    monkeypatch.setattr(simulate.Simulation, "step", signalling(step, 3))
    out = tmp_path / "part"
    assert main(["run", *ARGV, "--out", str(out)]) == 143
    monkeypatch.setattr(simulate.Simulation, "step", step)
    capsys.readouterr()
    folder = latest_checkpoint(out)
    assert folder is not None and folder.name == "round-00000003"
    return out, folder


def _edit_config(out: Path, folder: Path) -> None:
    path = out / "config.yaml"
    path.write_text(path.read_text().replace("lam: 0.01", "lam: 0.5"))


def _manifest(folder: Path, change: dict) -> None:
    m = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**m, **change}))


def _strip(folder: Path, *keys: str) -> None:
    m = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({k: v for k, v in m.items() if k not in keys}))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "config-edited": (
        _edit_config,
        "config.yaml differs from the config its checkpoint was written with (key 'lam')",
    ),
    "manifest-garbage": (
        lambda o, f: (f / MANIFEST).write_bytes(b"\x00\xff{"),
        "manifest.json cannot be read",
    ),
    "manifest-cut": (
        lambda o, f: (f / MANIFEST).write_text((f / MANIFEST).read_text()[:40]),
        "cannot be read",
    ),
    "manifest-format": (lambda o, f: _manifest(f, {"format": 99}), "not a checkpoint manifest"),
    "manifest-outside": (
        lambda o, f: _manifest(f, {"shards": ["../../../config.yaml"]}),
        "not a shard file of its folder",
    ),
    "manifest-absolute": (lambda o, f: _manifest(f, {"shards": ["/etc/passwd"]}), "outside the run"),
    "manifest-missing-shard": (lambda o, f: (f / "shard-00000.pt").unlink(), "which is missing"),
    "shard-cut": (
        lambda o, f: (f / "shard-00000.pt").write_bytes((f / "shard-00000.pt").read_bytes()[:100]),
        "shard-00000.pt has 100 bytes",
    ),
    "shard-altered": (lambda o, f: _flip(f / "shard-00000.pt"), "differs from the checksum"),
    "manifest-without-files": (
        lambda o, f: _manifest(f, {"files": {}}),
        "records no size and SHA-256 of shard-00000.pt",
    ),
    "manifest-files-stripped": (
        lambda o, f: _strip(f, "files"),
        "records no size and SHA-256 of shard-00000.pt",
    ),
    "manifest-config-digest-stripped": (
        lambda o, f: (_strip(f, "config", "config_sha256"), _edit_config(o, f)),
        "records no digest of the config it was written with",
    ),
    "manifest-without-config-digest": (
        lambda o, f: _strip(f, "config_sha256"),
        "records no digest of the config it was written with",
    ),
    "checkpoints-link": (
        lambda o, f: (
            os.rename(o / "checkpoints", o / "elsewhere"),
            (o / "checkpoints").symlink_to(o / "elsewhere"),
        ),
        "symbolic link",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_an_untrustworthy_checkpoint_is_refused_and_nothing_changes(stopped, capsys, case):
    out, folder = stopped
    damage, fragment = DAMAGE[case]
    damage(out, folder)
    before = folder_snapshot(out)
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error: ") and fragment in err, err
    assert folder_snapshot(out) == before  # nothing deleted, nothing rewritten


def test_a_later_checkpoint_cut_short_is_passed_over_and_said(stopped, capsys):
    out, folder = stopped
    cut = folder.with_name("round-00000004")
    cut.mkdir()
    (cut / "shard-00000.pt").write_bytes(b"half a shard")
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "warning: " in captured.err and "resuming from the checkpoint of round 3" in captured.err
    assert "round 4 was cut short" in captured.err and "warning" not in captured.out
    assert json.loads((out / "summary.json").read_text())["resumed_from_round"] == 3


def test_a_resumed_run_may_still_raise_rounds(stopped, capsys):
    """``--set rounds=...`` rewrites config.yaml; the checkpoints written after it record the new
    config, so a second stop and resume is accepted."""
    out, _ = stopped
    assert main(["run", "--resume", str(out), "--set", "rounds=8", "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["rounds"] == 8


def test_the_manifest_records_what_it_vouches_for(stopped):
    _, folder = stopped
    m = json.loads((folder / MANIFEST).read_text())
    shard = folder / "shard-00000.pt"
    assert m["files"]["shard-00000.pt"]["bytes"] == shard.stat().st_size
    assert len(m["files"]["shard-00000.pt"]["sha256"]) == 64 and len(m["config_sha256"]) == 64
    assert m["config"]["lam"] == 0.01 and "rounds" not in m["config"]  # a resume may change rounds


def _stop_after(out: Path, extra: list[str], at: int, monkeypatch) -> None:  # noqa: ANN001
    """Run ``ARGV`` + ``extra`` into ``out``, stopped by SIGTERM after round ``at``."""
    step = simulate.Simulation.step
    monkeypatch.setattr(simulate.Simulation, "step", signalling(step, at))
    assert main(["run", *ARGV[:-1], *extra, "--quiet", "--out", str(out)]) == 143
    monkeypatch.setattr(simulate.Simulation, "step", step)


def test_a_shard_of_another_run_is_refused_with_or_without_its_record(stopped, tmp_path, monkeypatch, capsys):
    """Another run's shard (another seed, same round) copied over this one's: refused whether the
    manifest's record of the shard is kept (the digest differs) or stripped (nothing vouches)."""
    out, folder = stopped
    _stop_after(tmp_path / "other", ["seed=1"], 3, monkeypatch)
    capsys.readouterr()
    theirs = tmp_path / "other" / "checkpoints" / folder.name / "shard-00000.pt"
    (folder / "shard-00000.pt").write_bytes(theirs.read_bytes())
    for strip, refusal in [
        (False, r"shard-00000\.pt (has \d+ bytes|differs from the checksum)"),
        (True, "records no size and SHA-256"),
    ]:
        if strip:
            _strip(folder, "files")
        before = folder_snapshot(out)
        assert main(["run", "--resume", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(refusal, err) and "nothing was changed" in err, err
        assert folder_snapshot(out) == before


def test_a_resume_may_not_change_rounds_of_a_schedule_that_spans_them(tmp_path, monkeypatch, capsys):
    """``rounds`` is resumable, but not under ``lr_schedule = cosine``: neither given again nor
    edited into config.yaml; ``eval_every`` still may change."""
    cosine = tmp_path / "cos"
    _stop_after(cosine, ["lr_schedule=cosine"], 3, monkeypatch)
    capsys.readouterr()
    before = folder_snapshot(cosine)
    assert main(["run", "--resume", str(cosine), "--set", "rounds=8", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'rounds' = 8 differs from the run's 6" in err, err
    assert "lr_schedule = cosine anneals the step size over rounds" in err and "only eval_every" in err
    assert folder_snapshot(cosine) == before
    path = cosine / "config.yaml"
    path.write_text(path.read_text().replace("rounds: 6", "rounds: 8"))
    assert main(["run", "--resume", str(cosine), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "differs from the config its checkpoint was written with (key 'rounds')" in err, err
    path.write_text(path.read_text().replace("rounds: 8", "rounds: 6"))
    assert main(["run", "--resume", str(cosine), "--set", "eval_every=3", "--quiet"]) == 0
    assert json.loads((cosine / "summary.json").read_text())["rounds"] == 6


def test_a_resume_on_other_data_is_refused(stopped, capsys):
    """``data_dir`` may change on resume only to where the same data lie: data that give another
    preprocessing.json than the run wrote (here the record edited, as other files would give it)
    are refused in one line, nothing changed."""
    out, _ = stopped
    record = json.loads((out / "preprocessing.json").read_text())
    record["clients"][2]["standardize"]["mean"][0] += 1.0
    (out / "preprocessing.json").write_text(json.dumps(record))
    before = folder_snapshot(out)
    assert main(["run", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the data read now differ from the data the run" in err, err
    assert "client 2's features or their standardisation" in err and "give the data_dir it used" in err
    assert folder_snapshot(out) == before
