"""Train mode of user models: ``nn.Dropout`` trains (masks from each client's own stream:
deterministic, independent of which clients share a process, exact on resume), evaluation runs
without it, and the layers that cannot train stacked are refused in one line naming the layer."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import sheaf_fmtl
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.models.user import ModelError, SeededDropout
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.runtime.run import loop
from tests.helpers import StopAt

from .test_user_models import tabular

KEYS = {"rounds": 4, "eval_every": 2, "batch_size": 8, "seed": 3, "graph": "complete", "alpha": 0.1}


def mlp(p: float) -> nn.Module:
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(p), nn.Linear(16, 3))


def test_dropout_trains_deterministically_and_evaluates_without_it() -> None:
    data = tabular()
    on = sheaf_fmtl.run(data=data, model=lambda: mlp(0.5), **KEYS)
    again = sheaf_fmtl.run(data=data, model=lambda: mlp(0.5), **KEYS)
    off = sheaf_fmtl.run(data=data, model=lambda: mlp(0.0), **KEYS)
    assert all(torch.equal(a, b) for a, b in zip(on.thetas, again.thetas, strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(on.thetas, off.thetas, strict=True))  # masks applied
    # round 0: the same initial models, evaluated without dropout: the same numbers
    assert on.metrics[0]["test_accuracy"] == off.metrics[0]["test_accuracy"]
    assert on.metrics[0]["train_loss"] == off.metrics[0]["train_loss"]


def test_the_batched_dropout_gradient_is_each_clients_own_autograd() -> None:
    """The oracle: per client, the module with its parameters and its mask, ``loss.backward()``."""
    fed = sheaf_fmtl.Federation(tabular(), lambda: mlp(0.3), graph="complete")
    sim = build_simulation(fed.config(**{**KEYS, "batch_size": 6}))
    cohort = sim.ctx.fed.cohorts[0]
    batch = cohort.sample(6, sim.ctx.batch_source)
    noise = cohort.draw_noise(batch, sim.ctx.batch_source)
    assert noise is not None and list(noise) == cohort.dropout == ["2"]
    assert noise["2"].shape == (cohort.size, 6, 16)
    thetas = sim.state.thetas[0] + 0.1 * torch.randn_like(sim.state.thetas[0])
    grads, losses = cohort.gradients(thetas, batch, noise)
    for c in range(cohort.size):
        module = copy.deepcopy(cohort.module)
        torch.nn.utils.vector_to_parameters(thetas[c], module.parameters())
        module[2].noise = noise["2"][c]
        out = module(batch.x[c])
        per = nn.functional.cross_entropy(out, batch.y[c], reduction="none")
        loss = (per * batch.mask[c]).sum() / batch.mask[c].sum()
        loss = loss + 0.5 * cohort.l2 * (nn.utils.parameters_to_vector(module.parameters()) ** 2).sum()
        g = torch.autograd.grad(loss, list(module.parameters()))
        torch.testing.assert_close(grads[c], torch.cat([t.reshape(-1) for t in g]))
        torch.testing.assert_close(losses[c], loss.detach())
    dropped = (noise["2"] < 0.3).float().mean().item()  # the law: each unit dropped with p
    assert 0.2 < dropped < 0.4


def test_a_clients_masks_do_not_depend_on_the_others() -> None:
    """Client 2's draws, stacked with all clients or alone: what makes processes agree."""
    fed_all = sheaf_fmtl.Federation(tabular(), lambda: mlp(0.5), graph="complete")
    sim = build_simulation(fed_all.config(**KEYS))
    cohort, source = sim.ctx.fed.cohorts[0], sim.ctx.batch_source
    full = cohort.sample(8, source)
    mine = cohort.draw_noise(full, source)
    sim2 = build_simulation(fed_all.config(**KEYS))
    cohort2, source2 = sim2.ctx.fed.cohorts[0], sim2.ctx.batch_source
    cohort2.sample(8, source2)
    only = full._replace(active=torch.tensor([2]))
    alone = cohort2.draw_noise(only, source2)
    assert mine is not None and alone is not None
    assert torch.equal(alone["2"][0], mine["2"][2])


def test_a_run_with_dropout_resumes_exactly(tmp_path: Path) -> None:

    fed = sheaf_fmtl.Federation(tabular(), lambda: mlp(0.5), graph="complete")
    full = fed.run(**KEYS)
    assert fed.run(out=tmp_path / "part", callbacks=[StopAt(3)], **KEYS).summary["status"] == "stopped"
    resumed = fed.run(resume=tmp_path / "part")
    assert resumed.final == full.final
    assert all(torch.equal(a, b) for a, b in zip(resumed.thetas, full.thetas, strict=True))


@pytest.mark.parametrize(
    ("layer", "name"),
    [(nn.Dropout2d(0.2), "Dropout2d"), (nn.AlphaDropout(0.2), "AlphaDropout")],
)
def test_other_dropout_kinds_are_refused_naming_the_layer(layer: nn.Module, name: str) -> None:
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(5, 8), layer, nn.Linear(8, 3))

    with pytest.raises(ModelError, match=rf"client 0's model has a {name} layer \(1\)") as e:
        sheaf_fmtl.run(data=tabular(), model=model, **KEYS)
    assert "\n" not in str(e.value)


def test_batch_norm_without_running_statistics_is_refused_naming_the_layer() -> None:
    def model() -> nn.Module:
        return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8, track_running_stats=False), nn.Linear(8, 3))

    with pytest.raises(ModelError, match=r"BatchNorm1d with track_running_stats=False \(1\).*keep") as e:
        sheaf_fmtl.run(data=tabular(), model=model, **KEYS)
    assert "\n" not in str(e.value)


def test_seeded_dropout_is_dropout_in_law_and_the_identity_without_noise() -> None:
    layer = SeededDropout(0.25)
    x = torch.randn(4, 6)
    assert torch.equal(layer(x), x)
    layer.noise = torch.tensor([[0.1, 0.3, 0.25, 0.9, 0.0, 0.5]]).expand(4, 6)
    want = x * torch.tensor([0.0, 1, 1, 1, 0, 1]) / 0.75
    torch.testing.assert_close(layer(x), want)
    assert "noise" not in layer.state_dict()  # not part of an exported model


DROPOUT_CODE = """
import numpy as np
from torch import nn


def silos(clients=4, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(clients):
        x = rng.normal(size=(24, 5)).astype(np.float32)
        y = (x[:, 0] + 0.3 * i > 0).astype(np.int64)
        out.append((x[:18], y[:18], x[18:], y[18:]))
    return out


def mlp():
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
"""


@pytest.mark.slow  # two processes start (about 15 s)
def test_dropout_runs_over_two_processes_as_in_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sheaf_fmtl.runtime.run.launching.launch import spawn

    name = f"dropcode_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(DROPOUT_CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    try:
        config = RunConfig(dataset=f"{name}:silos", model=f"{name}:mlp", **KEYS)
        one = loop.execute(config, None)
        summary = spawn(config.replace(processes=2), tmp_path / "ranks", progress=False, overwrite=False)
        assert summary["final"] == one.summary["final"] and summary["per_client"] == one.summary["per_client"]
    finally:
        sys.modules.pop(name, None)
