"""The MLflow and W&B loggers, with the real libraries: MLflow's local file store read back with
``MlflowClient``, W&B's offline files read back record by record (:mod:`._wandb_records`); each
checked against the run folder's own files (``metrics.csv``, ``summary.json``, ``checkpoint.pt``)."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError

from ._wandb_records import offline_runs

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

#: A validated run (``val_*`` columns) whose coupling learns edge weights (a per-edge series).
KEYS: dict[str, Any] = {
    "dataset": "synthetic",
    "clients": 5,
    "rounds": 12,
    "eval_every": 2,
    "batch_size": 4,
    "validation": 0.3,
    "early_stop_patience": 100,
}


@pytest.fixture(autouse=True)
def _no_tracker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


def _rows(out: Path) -> list[dict[str, float]]:
    with open(out / "metrics.csv", newline="") as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def _final(out: Path) -> dict[str, Any]:
    return torch.load(out / "checkpoint.pt", weights_only=True)


def _edge_weights(out: Path) -> dict[tuple[str, int], float]:
    """``(edge_weight/i-j, round) -> weight`` from ``checkpoint.pt``'s history."""
    final = _final(out)
    edges = final["edges"].tolist()
    history, rounds = final["edge_weight_history"], final["edge_weight_rounds"].tolist()
    return {
        (f"edge_weight/{i}-{j}", r): float(history[k, e])
        for k, r in enumerate(rounds)
        for e, (i, j) in enumerate(edges)
    }


def _mlflow(out: Path) -> tuple[Any, str]:
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    from mlflow.tracking import MlflowClient

    return MlflowClient((out / "mlruns").resolve().as_uri()), json.loads((out / "mlflow.json").read_text())[
        "run_id"
    ]


def test_mlflow_holds_the_config_rows_edges_summary_and_files(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    out = tmp_path / "run"
    result = sheaf_fmtl.run(out=out, log_mlflow=True, **KEYS)
    client, run_id = _mlflow(out)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "sheaf-fmtl"
    params, summary = run.data.params, result.summary
    assert float(params["lam"]) == summary["lam"] and params["maps"] == summary["maps"] == "redrawn"
    assert params["validation"] == "0.3" and params["rounds"] == "12" and params["log_mlflow"] == "true"
    rows = _rows(out)
    assert "val_accuracy" in rows[0] and "test_accuracy" not in run.data.metrics
    for column in ("val_accuracy", "train_loss", "objective", "transmitted_bits"):
        history = client.get_metric_history(run_id, column)
        assert [(m.step, m.value) for m in history] == [(int(r["round"]), r[column]) for r in rows]
    edges = _edge_weights(out)
    assert {k for k, _ in edges} <= set(run.data.metrics) and len(edges) >= 3 * summary["num_edges"]
    for key in {k for k, _ in edges}:
        got = {(key, m.step): m.value for m in client.get_metric_history(run_id, key)}
        assert got == pytest.approx({k: v for k, v in edges.items() if k[0] == key})
    final, last = _final(out), int(rows[-1]["round"])
    i, j = final["edges"][0].tolist()
    norm = client.get_metric_history(run_id, f"map_norm/{j}-{i}")  # P_ji: the edge's second half-edge
    assert [(m.step, m.value) for m in norm] == [(last, pytest.approx(float(final["map_norms"][1])))]
    assert run.data.metrics["summary.final"] == summary["final"]
    assert run.data.metrics["summary.best_test_accuracy"] == summary["best_test_accuracy"]
    assert run.data.tags["summary.status"] == "ok" and run.data.tags["summary.evaluated_on"] == "validation"
    assert {a.path for a in client.list_artifacts(run_id)} == {"summary.json", "config.yaml", "metrics.csv"}
    copy = Path(client.download_artifacts(run_id, "summary.json", str(tmp_path)))
    assert copy.read_text() == (out / "summary.json").read_text()


@pytest.mark.slow  # (W&B's service writes its file after finish(): seconds of waiting)
def test_wandb_offline_holds_the_config_rows_edges_and_summary(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="the W&B logger's tests need pip install 'sheaf-fmtl[wandb]'")
    out = tmp_path / "run"
    result = sheaf_fmtl.run(out=out, log_wandb=True, **KEYS)
    (run,) = offline_runs(out / "wandb")
    assert run.run_id == json.loads((out / "wandb.json").read_text())["run_id"] and run.exit_code == 0
    assert run.config["lam"] == result.summary["lam"] and run.config["maps"] == "redrawn"
    assert run.config["wandb_mode"] == "offline" and run.config["validation"] == 0.3
    rows = _rows(out)
    logged = [h for h in run.history if "val_accuracy" in h]
    assert [(h["round"], h["val_accuracy"], h["train_loss"]) for h in logged] == [
        (int(r["round"]), r["val_accuracy"], r["train_loss"]) for r in rows
    ]
    edges = {(k, h["round"]): v for h in run.history for k, v in h.items() if k.startswith("edge_weight/")}
    assert edges == pytest.approx(_edge_weights(out))
    assert run.summary["final"] == result.summary["final"] and run.summary["status"] == "ok"
    assert run.summary["best_test_accuracy"] == result.summary["best_test_accuracy"]


class Fail:
    """Raises at round ``at`` (the run ends with an error, its last checkpoint kept)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_round_end(self, round: int, metrics: Any, view: Any) -> None:  # noqa: ANN401
        if round == self.at:
            raise RuntimeError("the user's callback failed")


class Interrupt:
    """Sends this process SIGINT at round ``at``: the run stops with a checkpoint (interrupted)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_round_end(self, round: int, metrics: Any, view: Any) -> None:  # noqa: ANN401
        if round == self.at:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.slow
def test_an_error_fails_a_signal_kills_and_resumes_continue_the_same_runs_without_repeats(tmp_path):
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    pytest.importorskip("wandb", reason="the W&B logger's tests need pip install 'sheaf-fmtl[wandb]'")
    out, keys = tmp_path / "run", {**KEYS, "log_mlflow": True, "log_wandb": True, "checkpoint_every": 4}
    with pytest.raises(RuntimeError, match="the user's callback failed"):  # rows to 6, checkpoint at 4
        sheaf_fmtl.run(out=out, callbacks=[Fail(6)], **keys)
    client, run_id = _mlflow(out)
    assert client.get_run(run_id).info.status == "FAILED"
    assert [r.exit_code for r in offline_runs(out / "wandb")] == [1]
    sheaf_fmtl.run(resume=out, callbacks=[Interrupt(10)])  # from round 4: round 6 again, then a signal
    assert client.get_run(run_id).info.status == "KILLED"
    assert [r.exit_code for r in offline_runs(out / "wandb")] == [1, 128 + signal.SIGINT]
    result = sheaf_fmtl.run(resume=out, rounds=14)  # to the end, two rounds longer
    assert result.summary["status"] == "ok" and _mlflow(out)[1] == run_id
    run, rows = client.get_run(run_id), _rows(out)
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run_id, "val_accuracy")  # each round once, as metrics.csv has it
    assert [(m.step, m.value) for m in history] == [(int(r["round"]), r["val_accuracy"]) for r in rows]
    edges = {(k, m.step) for k, _ in _edge_weights(out) for m in client.get_metric_history(run_id, k)}
    assert sorted(edges) == sorted(_edge_weights(out)) and run.data.params["rounds"] == "12"
    assert run.data.tags["resumed.rounds"] == "14"  # (a parameter is never changed)
    runs = offline_runs(out / "wandb")
    assert {r.run_id for r in runs} == {json.loads((out / "wandb.json").read_text())["run_id"]}
    logged = [(h["round"], h["val_accuracy"]) for r in runs for h in r.history if "val_accuracy" in h]
    assert logged == [(int(r["round"]), r["val_accuracy"]) for r in rows] and runs[-1].exit_code == 0
    assert runs[-1].config["rounds"] == 14 and [int(r["round"]) for r in rows] == list(range(0, 15, 2))


@pytest.mark.slow
def test_overwrite_removes_what_the_loggers_wrote_and_nothing_of_yours(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    out = tmp_path / "run"
    small = {**KEYS, "rounds": 2, "eval_every": 1}
    sheaf_fmtl.run(out=out, log_mlflow=True, **small)
    assert (out / "mlruns").is_dir() and (out / "mlflow.json").is_file()
    (out / "notes.md").write_text("mine")
    sheaf_fmtl.run(out=out, overwrite=True, log_mlflow=True, **small)  # a fresh store, a new MLflow run
    client, run_id = _mlflow(out)
    assert len(client.get_metric_history(run_id, "val_accuracy")) == 3
    sheaf_fmtl.run(out=out, overwrite=True, **small)
    left = {p.name for p in out.iterdir()}
    assert not left & {"mlruns", "mlflow.json", ".sheaf-fmtl-owned"}, left
    assert (out / "notes.md").read_text() == "mine"


def test_a_missing_package_is_refused_in_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow: ImportError
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match=r"log_mlflow=True needs the mlflow-skinny package: .*\[mlflow\]'$"):
        sheaf_fmtl.run(log_mlflow=True, **KEYS)
    code = main(["run", "--out", str(tmp_path / "r"), "--quiet", "--set", "clients=4", "log_wandb=true"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and err[-1].endswith(
        "--set log_wandb=true needs the wandb package: pip install 'sheaf-fmtl[wandb]'"
    )
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="wandb_mode"):
        sheaf_fmtl.run(log_wandb=True, wandb_mode="cloud", **KEYS)


@pytest.fixture
def received(tmp_path: Path) -> tuple[Path, Path]:
    """A run stopped by a signal after round 2 of 4, whose ``config.yaml`` a sender pointed at
    places of theirs (these keys lie outside the checkpoint's digest): an MLflow store and a
    TensorBoard folder under ``tmp_path/theirs``, a W&B folder and W&B's online mode. Yields the
    run folder and ``theirs``."""
    out, theirs = tmp_path / "run", tmp_path / "theirs"
    small = {**KEYS, "rounds": 4, "eval_every": 1, "validation": 0.0, "early_stop_patience": 0}
    assert sheaf_fmtl.run(out=out, callbacks=[Interrupt(2)], **small).summary["status"] == "interrupted"
    config = yaml.safe_load((out / "config.yaml").read_text())
    sent = {
        "log_tensorboard": str(theirs / "tb"),
        "log_mlflow": True,
        "mlflow_tracking_uri": (theirs / "mlruns").as_uri(),
        "wandb_dir": str(theirs / "wandb"),
        "wandb_mode": "online",
    }
    assert set(sent) <= set(config)
    (out / "config.yaml").write_text(yaml.safe_dump({**config, **sent}, sort_keys=False))
    return out, theirs


@pytest.mark.parametrize("how", ["cli", "python"])
def test_a_resume_writes_nowhere_and_contacts_nothing_its_folder_names(received, capsys, how):
    """The loggers' destinations in a received ``config.yaml`` are not reused: one line says which
    and how to give them again; the loggers it asks for write into the run folder, and the resumed
    run's ``config.yaml`` records the defaults it ran with."""
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    out, theirs = received
    if how == "cli":
        assert main(["run", "--resume", str(out), "--quiet"]) == 0
        (said,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
        assert f"--set log_tensorboard={theirs / 'tb'}" in said and "--set wandb_mode=online" in said, said
    else:
        with pytest.warns(UserWarning, match="not reused from its config.yaml") as caught:
            sheaf_fmtl.run(resume=out)
        said = str(caught[0].message)
        assert f"log_tensorboard={str(theirs / 'tb')!r}" in said and "wandb_mode='online'" in said, said
    names = "log_tensorboard, mlflow_tracking_uri, wandb_dir, wandb_mode; to use one, give it again"
    assert names in said and "which server it talks to" in said, said
    assert not theirs.exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "ok"
    ran = yaml.safe_load((out / "config.yaml").read_text())
    assert ran["log_tensorboard"] == ran["mlflow_tracking_uri"] == ran["wandb_dir"] == ""
    assert ran["wandb_mode"] == "offline" and ran["log_mlflow"] is True
    client, run_id = _mlflow(out)  # (the default store: the run folder's own)
    assert [m.step for m in client.get_metric_history(run_id, "test_accuracy")] == [3, 4]


def test_a_destination_given_again_on_resume_is_used(received, tmp_path, capsys):
    pytest.importorskip("mlflow", reason="the MLflow logger's tests need pip install 'sheaf-fmtl[mlflow]'")
    out, theirs = received
    mine = tmp_path / "mine"
    again = [f"log_tensorboard={mine / 'tb'}", f"mlflow_tracking_uri={(mine / 'mlruns').as_uri()}"]
    assert main(["run", "--resume", str(out), "--quiet", "--set", *again]) == 0
    (said,) = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert "wandb_dir, wandb_mode;" in said and "log_tensorboard" not in said and "mlflow" not in said, said
    assert not theirs.exists() and any((mine / "tb").glob("events.out.tfevents.*"))
    ran = yaml.safe_load((out / "config.yaml").read_text())
    assert ran["log_tensorboard"] == str(mine / "tb") and ran["mlflow_tracking_uri"] == again[1].split("=")[1]
    assert (mine / "mlruns").is_dir() and not (out / "mlruns").exists()


def test_the_silos_addresses_of_a_received_folder_are_not_dialled_on_resume():
    """``tls_peers`` names the hosts a silo dials: like the loggers' servers, a resume takes it from
    the user only (given again: kept)."""
    from sheaf_fmtl.runtime.run.launching.resume import dropped_destinations

    received = {"transport": "tls", "tls_peers": "/elsewhere/peers.yaml", "tls_certs": "certs"}
    assert dropped_destinations(received, {}) == {"tls_peers": ""}
    assert dropped_destinations(received, {"tls_peers": "mine.yaml"}) == {}
