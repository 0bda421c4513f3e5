"""The scripts of ``examples/`` run (on their ``--quick`` settings) and compare what they say; they
set no key a run does not read (a warning would fail them)."""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import pytest
import torch

from sheaf_fmtl.algorithms.maps.edge_weights import EVERY
from sheaf_fmtl.config.usage import UnusedKeysWarning

from .conftest import NO_DATA, shared_data_dir

pytestmark = pytest.mark.filterwarnings(f"error::{UnusedKeysWarning.__module__}.UnusedKeysWarning")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _main(name: str):  # noqa: ANN202 - the script's main
    return runpy.run_path(str(EXAMPLES / name), run_name="example")["main"]


def test_mlp_silos_compares_two_widths_with_local_training_and_dfedu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = _main("mlp_silos.py")(["--quick"])
    assert list(results) == [
        "sheaf-fmtl (8 + 32 units)",
        "sheaf-fmtl aligned (8 + 32)",
        "local (8 + 32 units)",
        "dfedu (32 units)",
        "sheaf-fmtl redrawn (32)",
    ]
    sheaf, aligned, local, dfedu, redrawn = results.values()
    assert len(sheaf.summary["model_dims"]) == len(aligned.summary["model_dims"]) == 2
    assert len(dfedu.summary["model_dims"]) == len(redrawn.summary["model_dims"]) == 1
    assert sheaf.summary["transmitted_bits"] > 0 == local.summary["transmitted_bits"]
    # redrawn maps send gamma = 0.1 of what dFedU sends (d_e = floor(0.1 d) of d coordinates), and the
    # edge weights' two numbers per half-edge every EVERY rounds
    d, rounds = redrawn.summary["model_dims"][0], redrawn.summary["rounds"]
    weights = 2 * redrawn.summary["num_edges"] * 2 * 32 * math.ceil(rounds / EVERY)
    assert (redrawn.summary["transmitted_bits"] - weights) * d == dfedu.summary["transmitted_bits"] * (
        d // 10
    )
    assert all(math.isfinite(r.final or math.nan) for r in results.values())
    assert "sheaf-fmtl (8 + 32 units)" in capsys.readouterr().out


def test_cnn_datasets_runs_a_dataset_per_client(capsys: pytest.CaptureFixture[str]) -> None:
    results = _main("cnn_datasets.py")(["--quick"])
    assert list(results) == ["sheaf-fmtl", "local", "dfedu"]
    assert all(r.metric == "accuracy" and r.summary["num_clients"] == 4 for r in results.values())
    assert all(r.summary["flops_local"] > 0 for r in results.values())
    assert "dfedu" in capsys.readouterr().out


@pytest.mark.slow  # (about 20 s: R-MNIST read, BatchNorm's general batched path, MLflow)
def test_rmnist_toolbox_trains_the_standard_setting_and_scores_the_best_models_on_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mlflow", reason="the example logs to MLflow: pip install 'sheaf-fmtl[mlflow]'")
    if shared_data_dir() is None:
        pytest.skip(NO_DATA)
    from mlflow.tracking import MlflowClient

    result = _main("rmnist_toolbox.py")(["--quick", "--out", str(tmp_path / "run")])
    s = result.summary
    assert s["evaluated_on"] == "validation" and 0.0 <= s["best_test_accuracy"] <= 1.0
    assert s["lam_rule"] and s["coupling_step"].startswith("the local optimizer's effective step")
    assert result.config.partition == "dirichlet" and result.config.model == "cnn-bn"
    assert "batchnorm" in torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "val_accuracy" in header and not any(c.startswith("test_") for c in header)
    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'run' / 'mlruns'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "val_accuracy")
    assert [m.step for m in history] == [r["round"] for r in result.metrics]
    assert f"{s['best_test_accuracy']:.4f}" in capsys.readouterr().out
