"""The user's own data, models, loss and metric through the Python API (``sheaf_fmtl.run(data=...,
model=...)``, ``sheaf_fmtl.Federation``): a user module equal to a built-in model gives the built-in
run's numbers exactly, two architectures share one graph, a user loss is the one minimised, and
malformed inputs are refused before training in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

import sheaf_fmtl
from sheaf_fmtl.runtime.engine.simulate import build_simulation

SMALL = {"rounds": 3, "eval_every": 1, "batch_size": 8, "seed": 3}


def tabular(clients: int = 4, n: int = 24, features: int = 5, task: str = "classification") -> list[Any]:
    """Per-client ``(x_train, y_train, x_test, y_test)``; 3 classes, or a noisy linear target."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(clients):
        x = rng.normal(size=(n, features)).astype(np.float32)
        if task == "classification":
            y = (x[:, 0] + 0.3 * i > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)
        else:
            y = (x @ rng.normal(size=features) + 0.1 * rng.normal(size=n)).astype(np.float32)
        out.append((x[: n * 3 // 4], y[: n * 3 // 4], x[n * 3 // 4 :], y[n * 3 // 4 :]))
    return out


def images(clients: int = 4, n: int = 16) -> list[Any]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(clients):
        x = rng.normal(size=(n, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, 3, n)
        out.append((x[:12], y[:12], x[12:], y[12:]))
    return out


def _same(a: sheaf_fmtl.RunResult, b: sheaf_fmtl.RunResult) -> None:
    drop = ("wall_seconds",)
    rows = [[{k: v for k, v in r.items() if k not in drop} for r in res.metrics] for res in (a, b)]
    assert rows[0] == rows[1]
    assert all(torch.equal(x, y) for x, y in zip(a.thetas, b.thetas, strict=True))
    assert a.summary["flops_local"] == b.summary["flops_local"] > 0


def test_a_user_logistic_model_gives_the_built_in_runs_numbers() -> None:
    keys = {**SMALL, "dataset": "synthetic", "clients": 4, "graph": "complete", "maps": "learned"}
    built_in = sheaf_fmtl.run(model="logistic", **keys)

    def make(i: int, input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_outputs))

    own = sheaf_fmtl.run(model=make, **keys)
    assert own.config.model.startswith("<python: make #")
    _same(built_in, own)
    assert own.maps and all(torch.equal(own.maps[k], built_in.maps[k]) for k in built_in.maps)


def test_a_user_cnn_gives_the_built_in_runs_numbers() -> None:
    data = images()
    fed = sheaf_fmtl.Federation(data, graph=nx.cycle_graph(4))
    built_in = fed.run(model="cnn-small", **SMALL)

    def make() -> nn.Module:  # cnn-small on 1x8x8: conv5x5(16)-pool2-fc
        return nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))

    _same(built_in, sheaf_fmtl.run(data=data, model=make, graph=nx.cycle_graph(4), **SMALL))


def test_datasets_per_client_give_the_arrays_numbers() -> None:
    data = tabular()
    pairs = [
        (TensorDataset(torch.tensor(x), torch.tensor(y)), TensorDataset(torch.tensor(xt), torch.tensor(yt)))
        for x, y, xt, yt in data
    ]
    edges = [(0, 1), (1, 2, 2.0), (2, 3), (3, 0)]
    a = sheaf_fmtl.run(data=data, graph=edges, **SMALL)
    b = sheaf_fmtl.run(data=pairs, graph=edges, **SMALL)
    assert a.metric == "accuracy" and a.summary["num_edges"] == 4
    _same(a, b)


def _mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(5, width), nn.Tanh(), nn.Linear(width, 3))


def test_two_user_architectures_share_one_graph_with_learned_maps() -> None:
    result = sheaf_fmtl.run(
        data=tabular(), model=lambda i: _mlp(8 if i % 2 else 16), graph="complete", maps="learned", **SMALL
    )
    d8, d16 = 5 * 8 + 8 + 8 * 3 + 3, 5 * 16 + 16 + 16 * 3 + 3
    assert result.summary["model_dims"] == [d8, d16] and result.summary["status"] == "ok"
    assert [len(t) for t in result.thetas] == [d16, d8, d16, d8]
    assert result.maps[(0, 1)].shape == (int(0.3 * d8), d16)  # d_ij = floor(gamma min(d_i, d_j))
    assert math.isfinite(result.final or math.nan)


def test_user_architectures_with_the_coordinate_map_modes() -> None:
    """Two MLP widths couple their shared slices (``maps=aligned``); one width couples maps redrawn
    each round (with estimates); redrawn maps between two widths and feature maps on networks are
    refused in one line."""
    two = sheaf_fmtl.run(
        data=tabular(), model=lambda i: _mlp(8 if i % 2 else 16), graph="complete", maps="aligned", **SMALL
    )
    assert len(two.summary["model_dims"]) == 2 and math.isfinite(two.final or math.nan)
    assert two.summary["transmitted_bits"] > 0
    one = sheaf_fmtl.run(
        data=tabular(), model=lambda i: _mlp(16), graph="complete", maps="redrawn", estimates=True, **SMALL
    )
    assert math.isfinite(one.final or math.nan) and one.summary["coupling_state_bytes"] > 0
    for maps, message in (("redrawn", "couples whole models"), ("features", "feature columns")):
        with pytest.raises(ValueError, match=message) as err:
            sheaf_fmtl.run(
                data=tabular(), model=lambda i: _mlp(8 if i % 2 else 16), graph="complete", maps=maps
            )
        assert "\n" not in str(err.value)


def _unflatten(module: nn.Module, theta: torch.Tensor) -> dict[str, torch.Tensor]:
    parts = torch.split(theta, [p.numel() for p in module.parameters()])
    return {n: t.view(p.shape) for (n, p), t in zip(module.named_parameters(), parts, strict=True)}


def test_a_user_loss_is_the_one_minimised() -> None:
    """One full-batch local step equals ``theta - alpha grad(loss + l2/2 |theta|^2)`` by autograd."""
    data = tabular(task="regression")

    def make(i: int) -> nn.Module:
        return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1))

    def l1(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (out - target).abs().mean()

    fed = sheaf_fmtl.Federation(data, make, loss=l1, graph="complete")
    config = fed.config(algorithm="local", rounds=1, batch_size=0, alpha=0.5, l2=0.01, standardize=False)
    sim = build_simulation(config)
    before = [sim.theta(i).clone() for i in range(4)]
    sim.step()
    for i, (x, y, _, _) in enumerate(data):
        module = make(i)
        theta = before[i].clone().requires_grad_(True)
        out = torch.func.functional_call(module, _unflatten(module, theta), (torch.tensor(x),))
        f = l1(out, torch.tensor(y).unsqueeze(1)) + 0.5 * 0.01 * (theta * theta).sum()
        (g,) = torch.autograd.grad(f, theta, retain_graph=True)
        torch.testing.assert_close(sim.theta(i), before[i] - 0.5 * g, rtol=0, atol=1e-6)
        mse = ((out - torch.tensor(y).unsqueeze(1)) ** 2).mean() + 0.5 * 0.01 * (theta * theta).sum()
        (g_mse,) = torch.autograd.grad(mse, theta)
        assert not torch.allclose(sim.theta(i), before[i] - 0.5 * g_mse, atol=1e-4)  # not the default loss


def test_a_user_metric_is_reported_under_its_name(tmp_path: Path) -> None:
    def mae(out: torch.Tensor, target: torch.Tensor) -> float:
        return float((out - target).abs().mean())

    result = sheaf_fmtl.run(data=tabular(task="regression"), metric=mae, out=tmp_path / "run", **SMALL)
    assert result.metric == "mae" and "test_mae" in (tmp_path / "run" / "metrics.csv").read_text()
    assert result.metrics[-1]["test_mae"] == pytest.approx(result.final)


class _Counter(nn.Module):
    """The identity, counting its calls in a buffer (state that is not BatchNorm's)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Grows(nn.Module):
    """Replaces its weight by one shaped by its input on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w = nn.Parameter(torch.zeros(x.shape[1], 3))
        return x @ self.w


BAD = {
    "wrong output shape": (
        {"model": lambda: nn.Sequential(nn.Linear(5, 6), nn.Unflatten(1, (3, 2)))},
        "outputs [2, 3, 2]",
    ),
    "class ids out of range": (
        {"model": lambda: nn.Linear(5, 2)},
        "class ids reach 2 but its model outputs 2 scores",
    ),
    "parameters change shape": ({"model": _Grows}, "changed its parameters during a forward pass"),
    "lazy parameters": ({"model": lambda: nn.LazyLinear(3)}, "shape is set by its first input"),
    "buffers other than batch norm's": (
        {"model": lambda: nn.Sequential(nn.Linear(5, 3), _Counter())},
        "has buffers (1.calls) of a _Counter: only BatchNorm statistics",
    ),
    "not a module": ({"model": lambda: 3}, "returned a int for client 0; expected a torch.nn.Module"),
    "fails on its data": ({"model": lambda: nn.Linear(4, 3)}, "failed on its data (input [2, 5])"),
    "sum loss": (
        {"loss": lambda o, t: nn.functional.cross_entropy(o, t, reduction="sum")},
        "is not the mean",
    ),
    "metric not a number": ({"metric": lambda o, t: "high"}, "config key 'metric'"),
    "one model per client, too few": ({"model": [nn.Linear(5, 3)] * 3}, "3 models for 4 clients"),
    "disconnected graph": ({"graph": [(0, 1), (2, 3)]}, "is not connected"),
    "mixed targets": ({"data": tabular()[:2] + tabular(2, task="regression")}, "integer targets"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_input_is_refused_before_training_in_one_line(tmp_path: Path, case: str) -> None:
    keys, fragment = BAD[case]
    with pytest.raises(ValueError) as e:
        sheaf_fmtl.run(**{"data": tabular(), **keys}, out=tmp_path / "run", **SMALL)
    assert fragment in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_processes_and_resume_refuse_objects_they_cannot_recreate(tmp_path: Path) -> None:
    with pytest.raises(sheaf_fmtl.ConfigError, match="cannot re-create the Python objects given as dataset"):
        sheaf_fmtl.run(data=tabular(), processes=2, **SMALL)
    with pytest.raises(sheaf_fmtl.ConfigError, match="resumes through the sheaf_fmtl.Federation"):
        sheaf_fmtl.run(data=tabular(), resume=tmp_path, **SMALL)


def test_flops_are_counted_on_the_users_modules() -> None:
    """One full-batch local round: ``flops_local`` is FlopCounterMode's count of every client's
    forward and backward pass over its training data, on its own module."""
    data = tabular()
    result = sheaf_fmtl.run(
        data=data, model=lambda i: _mlp(8 if i % 2 else 16), algorithm="local", rounds=1, batch_size=0
    )
    expected = 0
    for i, (x, y, _, _) in enumerate(data):
        module = _mlp(8 if i % 2 else 16)
        with FlopCounterMode(display=False) as counter:
            nn.functional.cross_entropy(module(torch.tensor(x)), torch.tensor(y)).backward()
        expected += counter.get_total_flops()
    assert result.summary["flops_local"] == expected > 0


def test_an_importable_function_is_recorded_as_module_function() -> None:
    fed = sheaf_fmtl.Federation(tabular(), _mlp_16, loss=nn.functional.cross_entropy)
    config = fed.config(rounds=1)
    assert config.model == f"{__name__}:_mlp_16" and config.loss == "torch.nn.functional:cross_entropy"
    assert config.dataset.startswith("<python: 4 classification clients #")


def _mlp_16() -> nn.Module:
    return _mlp(16)


def test_run_takes_a_dataset_function_as_federation_run_does() -> None:
    """``sheaf_fmtl.run(dataset=f)`` calls ``f`` for the data, like ``Federation().run(dataset=f)``
    (it took any non-string dataset for the clients' data itself)."""

    def make_data() -> list[Any]:
        return tabular()

    one = sheaf_fmtl.run(dataset=make_data, graph="complete", **SMALL)
    other = sheaf_fmtl.Federation().run(dataset=make_data, graph="complete", **SMALL)
    assert one.final == other.final and len(one.summary["per_client"]) == 4
