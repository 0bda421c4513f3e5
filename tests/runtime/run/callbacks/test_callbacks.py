"""Callbacks: a stop request ends a run cleanly and resumably (the resumed run equals the
uninterrupted one exactly); the shipped CSV and TensorBoard loggers, early stopping and the
best-round checkpoint, each checked against the run's own files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.callbacks import BestCheckpoint, CSVLogger, EarlyStopping, RunView, Stop, TensorBoardLogger
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import DatasetError
from tests.helpers import checkpoint_thetas as _thetas
from tests.helpers import metric_rows as _rows
from tests.helpers import run_summary as _summary

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

BASE = {
    "dataset": "synthetic",
    "clients": 5,
    "rounds": 8,
    "eval_every": 2,
    "batch_size": 4,
    "local_epochs": 1,
    "stability_check": False,
    "algorithm": "sheaf-fmtl",
}


class StopAt:
    """Asks to stop after round ``at``; records what the loop handed it."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.seen: list[tuple[int, dict[str, Any] | None]] = []
        self.summaries: list[dict[str, Any]] = []

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> Stop | None:
        self.seen.append((round, metrics))
        return Stop("round reached") if round == self.at else None

    def on_run_end(self, summary: dict[str, Any]) -> None:
        self.summaries.append(summary)


@pytest.mark.parametrize(
    "keys",
    [
        {},
        {"optimizer": "adam", "lr_schedule": "cosine", "drop_prob": 0.2},  # optimizer state resumes too
        {"algorithm": "fedavg", "optimizer": "momentum", "lr_schedule": "step", "lr_step_every": 2},
        {  # torch's AdamW and scheduler, clipped, on uneven passes with faults: its state resumes bit for bit
            "optimizer": "AdamW",
            "lr_scheduler": "CosineAnnealingLR",
            "grad_clip": 0.5,
            "drop_prob": 0.2,
            "batch_size": 3,
        },
    ],
    ids=["sgd", "adam-cosine-faults", "fedavg-momentum-step", "adamw-scheduler-clip"],
)
def test_a_callback_stops_at_round_3_and_the_resumed_run_equals_the_uninterrupted_one(tmp_path, keys):
    config = RunConfig(**{**BASE, **keys})
    full = sheaf_fmtl.run(config, out=tmp_path / "full")
    stopper = StopAt(3)
    part = sheaf_fmtl.run(config, out=tmp_path / "part", callbacks=[stopper])
    summary = json.loads((tmp_path / "part" / "summary.json").read_text())
    assert summary["status"] == part.summary["status"] == "stopped"
    assert (summary["stopped_by"], summary["rounds_done"], summary["stop_reason"]) == (
        "StopAt",
        3,
        "round reached",
    )
    assert [r for r, _ in stopper.seen] == [0, 1, 2, 3]
    assert [m is None for _, m in stopper.seen] == [False, True, False, True]  # rows of evaluated rounds
    seen = [{k: v for k, v in stopper.seen[i][1].items() if k != "wall_seconds"} for i in (0, 2)]
    assert seen == [{k: v for k, v in r.items() if k != "wall_seconds"} for r in full.metrics[:2]]
    assert stopper.summaries[0]["status"] == "stopped"
    resumed = sheaf_fmtl.run(resume=tmp_path / "part")
    assert resumed.summary["status"] == "ok" and resumed.summary["resumed_from_round"] == 3
    assert _summary(tmp_path / "part") == _summary(tmp_path / "full")
    assert _rows(tmp_path / "part") == _rows(tmp_path / "full")
    assert all(
        torch.equal(a, b) for a, b in zip(_thetas(tmp_path / "full"), _thetas(tmp_path / "part"), strict=True)
    )
    assert full.summary["status"] == "ok"


def test_the_view_reads_each_clients_model_and_changes_nothing(tmp_path):
    config = RunConfig(**{**BASE, "rounds": 4})
    seen: dict[str, Any] = {}

    class Peek:
        def on_round_end(self, round: int, metrics: Any, view: RunView) -> None:
            theta = view.theta(2)
            theta.add_(1.0)  # a copy: the run does not see it
            if round == config.rounds:
                seen["thetas"] = view.thetas()
                seen["model"] = view.model(2)
                seen["clients"], seen["metric"] = view.clients(), view.metric_column

    result = sheaf_fmtl.run(config, callbacks=[Peek()])
    plain = sheaf_fmtl.run(config)
    assert all(torch.equal(a, b) for a, b in zip(result.thetas, plain.thetas, strict=True))
    assert all(torch.equal(seen["thetas"][i], result.thetas[i]) for i in range(config.clients))
    params = torch.nn.utils.parameters_to_vector(seen["model"].parameters())
    assert torch.equal(params, result.thetas[2])
    assert seen["clients"] == list(range(config.clients)) and seen["metric"] == "test_accuracy"


def test_csv_logger_writes_what_metrics_csv_holds(tmp_path):
    config = RunConfig(**BASE)
    sheaf_fmtl.run(config, out=tmp_path / "run", callbacks=[CSVLogger(tmp_path / "logs" / "m.csv")])
    assert (tmp_path / "logs" / "m.csv").read_text() == (tmp_path / "run" / "metrics.csv").read_text()


def test_tensorboard_events_are_readable_and_hold_the_rows(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = RunConfig(**BASE)
    result = sheaf_fmtl.run(config, callbacks=[TensorBoardLogger(tmp_path / "tb")])
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert {"test_accuracy", "train_loss", "objective", "transmitted_bits"} <= set(events.Tags()["scalars"])
    for tag in ("test_accuracy", "train_loss"):
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        want = [(r["round"], r[tag]) for r in result.metrics]
        assert [s for s, _ in got] == [s for s, _ in want] == [0, 2, 4, 6, 8]
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)


def test_the_cli_keys_log_to_tensorboard_and_stop_early(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, tb = tmp_path / "run", tmp_path / "tb"
    # lam = 0 and alpha tiny: the accuracy barely moves, so patience 1 stops at the first evaluation
    # that does not beat round 0's; the rows are the validation split's
    keys = [
        "dataset=synthetic",
        "clients=4",
        "rounds=40",
        "eval_every=2",
        "alpha=1e-9",
        "lam=0",
        "validation=0.3",
    ]
    code = main(
        [
            "run",
            "--out",
            str(out),
            "--quiet",
            "--set",
            *keys,
            f"log_tensorboard={tb}",
            "early_stop_patience=1",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["stopped_by"] == "EarlyStopping"
    rows = _rows(out)
    metric = [float(r["val_accuracy"]) for r in rows]
    first_bad = next(i for i in range(1, len(metric)) if not metric[i] > max(metric[:i]))
    assert summary["rounds_done"] == int(rows[first_bad]["round"]) == int(rows[-1]["round"])
    assert "stopped by EarlyStopping" in capsys.readouterr().out
    best = metric.index(max(metric))  # the first best evaluation: what best.pt holds
    assert sheaf_fmtl.load(out, round="best").round == int(rows[best]["round"])
    # the keys leave the mathematics alone: a resume with a longer patience runs to the end, and its
    # best round is the best of both parts (best.pt read back, not replaced by a worse evaluation);
    # the TensorBoard folder is given again (a resume never takes a destination from the folder)
    again = ["early_stop_patience=100", f"log_tensorboard={tb}"]
    assert main(["run", "--resume", str(out), "--quiet", "--set", *again]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and [int(r["round"]) for r in _rows(out)] == list(range(0, 41, 2))
    metric = [float(r["val_accuracy"]) for r in _rows(out)]
    best_round = int(_rows(out)[metric.index(max(metric))]["round"])
    saved = torch.load(out / "best.pt", weights_only=True)
    assert saved["round"] == best_round and saved["value"] == max(metric)
    loaded = sheaf_fmtl.load(out, round="best")
    assert loaded.round == best_round and all(
        torch.equal(a, b) for a, b in zip(loaded.thetas, saved["thetas"], strict=True)
    )
    events = EventAccumulator(str(tb))  # both runs' event files: every round once
    events.Reload()
    assert [e.step for e in events.Scalars("val_accuracy")] == list(range(0, 41, 2))
    with pytest.raises(ConfigError, match="early_stop_patience"):
        RunConfig(early_stop_patience=-1)


def test_early_stopping_never_watches_the_test_split(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"validation = 0 holds none out .* add validation=0.2"):
        RunConfig(early_stop_patience=3)
    assert RunConfig(early_stop_patience=3, validation=0.2).early_stop_patience == 3
    config = RunConfig(**{**BASE, "rounds": 2})
    with pytest.raises(ValueError, match="EarlyStopping watches the validation split"):
        sheaf_fmtl.run(config, callbacks=[EarlyStopping(2)])
    sheaf_fmtl.run(config, out=tmp_path / "r")
    with pytest.raises(DatasetError, match="best.pt is missing"):
        sheaf_fmtl.load(tmp_path / "r", round="best")
    assert sheaf_fmtl.load(tmp_path / "r").round is None


class _View:
    metric, metric_column, higher_is_better = "mse", "val_mse", False
    config = RunConfig(validation=0.2)


@pytest.mark.parametrize(
    ("values", "patience", "min_delta", "goal", "stop_at"),
    [
        ([0.5, 0.4, 0.45, 0.39, 0.41, 0.5, 0.5], 2, 0.0, "auto", 5),  # lower is better (MSE)
        ([0.5, 0.4, 0.395, 0.39, 0.3], 2, 0.02, "auto", 3),  # 0.005 steps do not count
        ([0.5, 0.6, 0.6, 0.59], 2, 0.0, "max", 3),
        ([0.5, 0.4, 0.3], 1, 0.0, "auto", None),
    ],
)
def test_early_stopping_by_hand(values, patience, min_delta, goal, stop_at):
    stopper = EarlyStopping(patience, min_delta, goal)
    answers = [stopper.on_round_end(k, {"val_mse": v}, _View()) for k, v in enumerate(values)]  # type: ignore[arg-type]
    stops = [k for k, a in enumerate(answers) if isinstance(a, Stop)]
    assert (stops[0] if stops else None) == stop_at
    assert stopper.on_round_end(99, None, _View()) is None  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(0)


def test_best_checkpoint_keeps_the_thetas_of_the_best_evaluation(tmp_path):
    config = RunConfig(**{**BASE, "eval_every": 1, "rounds": 6})
    best = BestCheckpoint()
    result = sheaf_fmtl.run(config, out=tmp_path / "run", callbacks=[best])
    rows = result.metrics
    metric = [r["test_accuracy"] for r in rows]
    k = max(range(len(metric)), key=lambda i: (metric[i], -i))  # the first best
    saved = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    assert saved["round"] == best.round == rows[k]["round"] and saved["value"] == metric[k]
    assert saved["round"] > 0  # (round 0's models would be the initial ones)
    again = sheaf_fmtl.run(config.replace(rounds=saved["round"]))  # the oracle: a run that ends there
    assert all(torch.equal(a, b) for a, b in zip(saved["thetas"], again.thetas, strict=True))


def test_an_object_without_hooks_is_refused():
    with pytest.raises(TypeError, match="neither on_round_end"):
        sheaf_fmtl.run(RunConfig(**{**BASE, "rounds": 1}), callbacks=[object()])


def test_overwrite_removes_the_previous_runs_best_round(tmp_path):
    out = tmp_path / "run"
    keys = ["dataset=synthetic", "clients=4", "rounds=2", "eval_every=1", "validation=0.3"]
    assert main(["run", "--out", str(out), "--quiet", "--set", *keys, "early_stop_patience=5"]) == 0
    assert (out / "best.pt").is_file()
    assert main(["run", "--out", str(out), "--quiet", "--overwrite", "--set", *keys]) == 0
    assert not (out / "best.pt").exists()  # the new run kept none: never the old run's models
    with pytest.raises(DatasetError, match="best.pt is missing"):
        sheaf_fmtl.load(out, round="best")


class _StopAt:
    """Asks the run to stop at round ``at``."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> Stop | None:
        return Stop("asked") if round == self.at else None


def test_patience_running_out_at_the_last_round_is_a_finished_run(tmp_path, capsys):
    """Early stopping whose patience runs out at the last round stopped nothing: every round ran."""
    out = tmp_path / "run"
    keys = ["dataset=synthetic", "clients=4", "rounds=3", "eval_every=1", "batch_size=8", "validation=0.3"]
    never_better = ["early_stop_patience=3", "early_stop_min_delta=10"]  # round 0 stays the best
    assert main(["run", "--out", str(out), "--quiet", "--set", *keys, *never_better]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["stop_at_last_round"]["by"] == "EarlyStopping"
    assert "did not improve" in summary["stop_at_last_round"]["reason"]
    assert not {"rounds_done", "stopped_by", "stop_reason"} & set(summary)
    printed = capsys.readouterr().out
    assert "ran all 3 rounds; EarlyStopping asked to stop at the last one" in printed
    assert "stopped by" not in printed and not (out / "checkpoints").exists()
    assert sheaf_fmtl.load(out).evaluate("validation")["mean"] == pytest.approx(summary["final"], abs=1e-6)
    assert int(_rows(out)[-1]["round"]) == 3


@pytest.mark.parametrize(("at", "status"), [(2, "stopped"), (3, "ok")])
def test_a_stop_before_the_last_round_stops_and_one_at_it_finishes(tmp_path, at, status):
    result = sheaf_fmtl.run(out=tmp_path / "r", callbacks=[_StopAt(at)], **{**BASE, "rounds": 3})
    assert result.summary["status"] == status
    if status == "stopped":
        assert result.summary["rounds_done"] == 2 and result.summary["stopped_by"] == "_StopAt"
    else:
        assert result.summary["stop_at_last_round"] == {"by": "_StopAt", "reason": "asked"}
        assert "rounds_done" not in result.summary
