"""User code named in a config as ``module:function`` (``model``, ``dataset``, ``loss``,
``metric``): imported when the config is loaded, refused in one line when missing or wrong, and
re-created from the config where Python objects cannot be (checkpoints and resume, processes = K);
a run given Python objects resumes only through its own :class:`sheaf_fmtl.Federation`."""

from __future__ import annotations

import csv
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.run import loop
from sheaf_fmtl.runtime.run.launching.launch import spawn

from ..runtime.run.checkpoints.test_checkpoint import _stopped

USER_CODE = """
import numpy as np
import torch
from torch import nn


def silos(clients=4, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(clients):
        x = rng.normal(size=(20, 5)).astype(np.float32)
        y = (x @ np.arange(1, 6) / 5 + 0.2 * i).astype(np.float32)
        out.append((x[:15], y[:15], x[15:], y[15:]))
    return out


def mlp(i, input_shape, num_outputs):
    width = 6 if i % 2 else 10
    return nn.Sequential(nn.Linear(input_shape[0], width), nn.Tanh(), nn.Linear(width, num_outputs))


def huber(out, target):
    return nn.functional.huber_loss(out, target)


def mae(out, target):
    return float((out - target).abs().mean())


def neg_mae(out, target):
    return -float((out - target).abs().mean())


neg_mae.higher_is_better = True


def not_a_model(i):
    return "a string"


def not_data(clients=4, seed=0):
    return 42


NUMBER = 3
"""
TINY = {"rounds": 4, "eval_every": 2, "batch_size": 8, "graph": "complete", "alpha": 0.05}


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of user code in the working folder, importable by this process and its children."""
    name = f"usercode_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(USER_CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    yield name
    sys.modules.pop(name, None)


def _config(mod: str, **keys: Any) -> dict[str, Any]:
    base = {"dataset": f"{mod}:silos", "model": f"{mod}:mlp", "loss": f"{mod}:huber", "metric": f"{mod}:mae"}
    return {**base, **TINY, **keys}


def test_a_config_naming_user_code_runs_from_the_command_line(user_module: str, capsys: Any) -> None:
    Path("run.yaml").write_text(yaml.safe_dump({**_config(user_module), "data": {"clients": 5}}))
    assert main(["run", "run.yaml", "--out", "out", "--quiet"]) == 0
    summary = json.loads(Path("out/summary.json").read_text())
    assert summary["metric"] == "mae" and summary["num_clients"] == 5 and len(summary["model_dims"]) == 2
    assert yaml.safe_load(Path("out/config.yaml").read_text())["model"] == f"{user_module}:mlp"


def test_sweep_ranks_a_user_metric_the_way_its_goal_says(user_module: str, capsys: Any) -> None:
    """MAE with ``metric_goal=min`` and minus MAE with ``higher_is_better = True`` pick the same cell,
    ranked ascending and descending; without a goal the sweep refuses before running a cell."""
    grid = ["--grid", "alpha=0.001,0.05,0.2", "--validation", "0.3"]
    Path("mae.yaml").write_text(yaml.safe_dump(_config(user_module)))
    assert main(["sweep", "mae.yaml", *grid, "--out", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--set metric_goal=max or --set metric_goal=min" in err, err
    assert not Path("none").exists()
    assert main(["sweep", "mae.yaml", *grid, "--set", "metric_goal=min", "--out", "min"]) == 0
    Path("neg.yaml").write_text(yaml.safe_dump(_config(user_module, metric=f"{user_module}:neg_mae")))
    assert main(["sweep", "neg.yaml", *grid, "--out", "max"]) == 0
    low = list(csv.DictReader(open("min/sweep.csv")))
    high = list(csv.DictReader(open("max/sweep.csv")))
    maes = [float(r["validation_mae"]) for r in low]
    negs = [float(r["validation_neg_mae"]) for r in high]
    assert maes == sorted(maes) and negs == sorted(negs, reverse=True) and len(set(maes)) == 3
    assert [r["alpha"] for r in low] == [r["alpha"] for r in high]
    assert yaml.safe_load(Path("min/best.yaml").read_text())["alpha"] == float(low[0]["alpha"])


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        (
            "model",
            "nosuchmodule_xyz:mlp",
            "config key 'model' = 'nosuchmodule_xyz:mlp': cannot import module",
        ),
        ("model", "{mod}:resnet8", "has no attribute 'resnet8'"),
        ("loss", "{mod}:NUMBER", "names a int, expected a callable"),
        ("model", "{mod}:not_a_model", "returned a str for client 0; expected a torch.nn.Module"),
        ("dataset", "{mod}:not_data", "config key 'dataset' = '{mod}:not_data' returned unusable data"),
        ("metric", "accuracy_score", "config key 'metric': 'accuracy_score' is not allowed"),
    ],
)
def test_bad_user_code_is_one_line_exit_2(
    user_module: str, capsys: Any, key: str, value: str, fragment: str
) -> None:
    Path("run.yaml").write_text(yaml.safe_dump({**_config(user_module), key: value.format(mod=user_module)}))
    assert main(["run", "run.yaml", "--out", "out", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sheaf-fmtl: error: ") and len(err.splitlines()) == 1, err
    assert fragment.format(mod=user_module) in err, err
    assert not Path("out").exists()


def test_user_code_checkpoints_and_resumes_to_the_uninterrupted_run(user_module: str, tmp_path: Path) -> None:
    config = RunConfig(**_config(user_module))
    loop.execute(config, tmp_path / "full")
    assert _stopped(config, tmp_path / "part", at=2)["status"] == "interrupted"
    with pytest.raises(ValueError, match="never runs its own code") as refused:
        sheaf_fmtl.run(resume=tmp_path / "part")
    assert "or pass trust_plugins=True" in str(refused.value)  # the hint, followed:
    assert sheaf_fmtl.run(resume=tmp_path / "part", trust_plugins=True).summary["status"] == "ok"
    with pytest.raises(ValueError, match="trust_plugins=True applies to resume='RUN_DIR'"):
        sheaf_fmtl.run(config, trust_plugins=True)
    full, part = (json.loads((tmp_path / p / "summary.json").read_text()) for p in ("full", "part"))
    assert part["final"] == full["final"] and part["flops"] == full["flops"]
    a, b = (torch.load(tmp_path / p / "checkpoint.pt")["thetas"] for p in ("full", "part"))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow  # two processes start (about 15 s)
def test_user_code_runs_over_two_processes_as_in_one(user_module: str, tmp_path: Path) -> None:
    config = RunConfig(**_config(user_module))
    one = loop.execute(config, None)
    summary = spawn(config.replace(processes=2), tmp_path / "ranks", progress=False, overwrite=False)
    assert summary["final"] == one.summary["final"] and summary["flops"] == one.summary["flops"]


def test_a_federation_resumes_its_own_run_and_nothing_else_can(tmp_path: Path) -> None:
    from tests.models.test_user_models import tabular

    fed = sheaf_fmtl.Federation(tabular(), lambda i: torch.nn.Linear(5, 3), graph="complete")
    config = fed.config(**TINY)
    full = fed.run(**TINY)
    for part in ("a", "b"):
        assert _stopped(config, tmp_path / part, at=1)["status"] == "interrupted"
    resumed = fed.run(resume=tmp_path / "a")
    assert resumed.final == full.final
    assert all(torch.equal(x, y) for x, y in zip(resumed.thetas, full.thetas, strict=True))
    del fed
    gc.collect()
    with pytest.raises(ValueError, match="this process does not hold"):  # as in another process
        sheaf_fmtl.run(resume=tmp_path / "b")
