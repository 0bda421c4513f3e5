"""A disk that fills up while a run writes its folder: one line naming the folder and what was kept,
no file cut short (``metrics.csv`` back to its last whole row), and the run resumes once there is
space again."""

from __future__ import annotations

import errno
import json
from typing import Any

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.runtime.run.folder import recorder as recorder_module

SETS = ["--set", "clients=4", "rounds=5", "eval_every=1", "batch_size=4"]


class FillsUp:
    """A text file whose ``fail_at``-th write puts a few bytes on disk and then finds it full."""

    def __init__(self, real: Any, fail_at: int) -> None:  # noqa: ANN401 - an open text file
        self.real, self.left = real, fail_at

    def write(self, text: str) -> int:
        self.left -= 1
        if self.left == 0:
            self.real.write(text[:7])
            self.real.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        return int(self.real.write(text))

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - tell, flush, close, name
        return getattr(self.real, name)


def test_a_full_disk_ends_the_run_in_one_line_and_cuts_no_file_short(tmp_path, monkeypatch, capsys):
    init = recorder_module.Recorder.__init__

    def init_then_fill(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        init(self, *args, **kwargs)
        if self._file is not None:
            self._file = FillsUp(self._file, fail_at=3)  # the row of round 2
            self._csv = recorder_module.csv.writer(self._file, lineterminator="\n")

    monkeypatch.setattr(recorder_module.Recorder, "__init__", init_then_fill)
    out = tmp_path / "run"
    assert main(["run", "--quiet", *SETS, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{out}: the disk is full (No space left on device)" in err, err
    assert "kept metrics.csv to round 1" in err and "every file whole" in err
    text = (out / "metrics.csv").read_text()
    lines = text.splitlines()
    assert text.endswith("\n") and [line.split(",")[0] for line in lines[1:]] == ["0", "1"]
    assert len({line.count(",") for line in lines}) == 1  # no row cut short
    monkeypatch.setattr(recorder_module.Recorder, "__init__", init)
    if "the checkpoint of round" in err:  # space again: the run continues where it stopped
        assert main(["run", "--resume", str(out), "--quiet"]) == 0
        assert json.loads((out / "summary.json").read_text())["status"] == "ok"


@pytest.mark.parametrize("code", [errno.EACCES])
def test_another_write_error_is_not_called_a_full_disk(tmp_path, monkeypatch, capsys, code):
    def refuse(self, row):  # noqa: ANN001, ANN202
        raise OSError(code, "Permission denied")

    monkeypatch.setattr(recorder_module.Recorder, "log", refuse)
    assert main(["run", "--quiet", *SETS, "--out", str(tmp_path / "run")]) == 2
    assert "disk is full" not in capsys.readouterr().err
