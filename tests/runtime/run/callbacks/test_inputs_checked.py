"""Inputs are checked where they enter and the message names them: a run's callbacks (one object
instead of a list, a class instead of an instance, an answer that is neither a stop nor a go; a
NumPy or torch boolean is a boolean), and ``log_tensorboard`` (a file, or under one) before the run
folder is touched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.callbacks import EarlyStopping
from sheaf_fmtl.cli import main
from tests.helpers import error_line, folder_snapshot

KEYS = {"clients": 4, "rounds": 4, "eval_every": 1, "batch_size": 4}


class Answers:
    """Answers ``value`` from round 2 on."""

    def __init__(self, value: object) -> None:
        self.value = value

    def on_round_end(self, round: int, metrics: object, view: object) -> object:
        return self.value if round >= 2 else None


@pytest.mark.parametrize(
    "value", [np.bool_(True), torch.tensor(True), torch.tensor([True])], ids=["numpy", "torch", "torch-1"]
)
def test_a_numpy_or_torch_boolean_stops_the_run(value):
    result = sheaf_fmtl.run(callbacks=[Answers(value)], **KEYS)
    assert result.summary["status"] == "stopped" and result.summary["rounds_done"] == 2


@pytest.mark.parametrize("value", [np.bool_(False), torch.tensor(False), False, None])
def test_a_false_answer_goes_on(value):
    assert sheaf_fmtl.run(callbacks=[Answers(value)], **KEYS).summary["status"] == "ok"


@pytest.mark.parametrize(
    "callbacks, message",
    [
        (EarlyStopping(2), "callbacks takes a list of callback objects, not one EarlyStopping"),
        (
            [EarlyStopping],
            r"callbacks: EarlyStopping is a class; give an instance, callbacks=\[EarlyStopping",
        ),
        ([Answers(1)], r"Answers.on_round_end returned 1 \(int\); return a Stop, True / False, or None"),
        ([Answers("stop")], r"returned 'stop' \(str\)"),
        ([Answers(torch.ones(3, dtype=torch.bool))], r"returned tensor"),
    ],
    ids=["one-object", "class", "int", "text", "tensor"],
)
def test_a_callback_that_is_not_one_is_refused_naming_the_argument(tmp_path, callbacks, message):
    with pytest.raises(TypeError, match=message) as err:
        sheaf_fmtl.run(out=tmp_path / "run", callbacks=callbacks, **KEYS)
    assert "\n" not in str(err.value)
    if "returned" not in message:  # refused before anything is written
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_tensorboard_folder_that_cannot_be_written_is_refused_before_the_run_folder(
    tmp_path, capsys, where
):
    (tmp_path / "taken").write_text("a file of yours")
    log_dir = tmp_path / "taken" if where == "file" else tmp_path / "taken" / "tb"
    sets = ["--set", *(f"{k}={v}" for k, v in KEYS.items()), f"log_tensorboard={log_dir}"]
    assert main(["run", "--quiet", *sets, "--out", str(tmp_path / "new")]) == 2
    err = error_line(capsys)
    assert "config key 'log_tensorboard'" in err and f"{tmp_path / 'taken'} is a file, not a folder" in err
    assert not (tmp_path / "new").exists()  # a refused start leaves nothing
    old = tmp_path / "old"
    assert main(["run", "--quiet", "--set", *(f"{k}={v}" for k, v in KEYS.items()), "--out", str(old)]) == 0
    before = folder_snapshot(old)
    assert main(["run", "--quiet", *sets, "--out", str(old), "--overwrite"]) == 2
    assert "log_tensorboard" in error_line(capsys)
    assert folder_snapshot(old) == before  # the earlier run as it was
    assert (tmp_path / "taken").read_text() == "a file of yours"
