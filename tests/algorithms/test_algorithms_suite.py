"""One suite over the registry (STYLE.md, after optax's ``_common_test.py``): every algorithm is
deterministic under a seed, keeps the state's shapes, and decreases its objective on a small strongly
convex problem (linear regression, full-batch gradients)."""

from __future__ import annotations

import pytest
import torch

from sheaf_fmtl.algorithms import ALGORITHMS
from sheaf_fmtl.algorithms.base import State

from .._baselines_problems import federation, regression_dataset, simulation

NAMES = sorted(ALGORITHMS)
FED = federation(regression_dataset(sizes=(10, 12, 14, 9)))


def _tensors(state: State) -> dict[str, torch.Tensor]:
    """Every tensor of the state (thetas, maps, global models, ...) by a stable name."""
    out: dict[str, torch.Tensor] = {}
    for key, value in vars(state).items():
        values = value if isinstance(value, list) else [value]
        for k, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                out[f"{key}[{k}]"] = v
    return out


def test_registry_holds_every_algorithm() -> None:
    assert {"sheaf-fmtl", "local", "dpsgd", "dfedu", "fedavg", "ditto", "pfedme", "perfedavg"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_under_seed(name: str) -> None:
    runs = []
    for _ in range(2):
        sim = simulation(name, FED, batch_size=4, seed=11, local_steps=2)
        for _ in range(3):
            sim.step()
        runs.append(_tensors(sim.state))
    assert runs[0].keys() == runs[1].keys()
    for key in runs[0]:
        assert torch.equal(runs[0][key], runs[1][key]), key
    other = simulation(name, FED, batch_size=4, seed=12, local_steps=2)
    for _ in range(3):
        other.step()
    assert not torch.equal(other.state.thetas[0], runs[0]["thetas[0]"])


@pytest.mark.parametrize("name", NAMES)
def test_state_shapes_preserved(name: str) -> None:
    sim = simulation(name, FED, batch_size=4)
    before = {k: (v.shape, v.dtype) for k, v in _tensors(sim.state).items()}
    assert [t.shape for t in sim.state.thetas] == [(c.size, c.dim) for c in FED.cohorts]
    for _ in range(2):
        sim.step()
    after = {k: (v.shape, v.dtype) for k, v in _tensors(sim.state).items() if k in before}
    assert after == before


@pytest.mark.parametrize("name", NAMES)
def test_objective_decreases(name: str) -> None:
    steps = {"alpha": 0.05, "lam": 0.1, "eta": 0.01, "inner_lr": 0.05, "perfedavg_beta": 0.05}
    sim = simulation(name, FED, batch_size=0, **steps)
    start = sim.evaluate()["objective"]
    for _ in range(40):
        sim.step()
        assert sim.finite()
    end = sim.evaluate()["objective"]
    assert end < 0.5 * start, (start, end)
