"""One suite over the registries (after optax's ``_common_test.py``): every algorithm, and every map
mode of Sheaf-FMTL, is deterministic under a seed, keeps the state's shapes, and decreases its
objective on a small strongly convex problem (linear regression, full-batch gradients)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms import ALGORITHMS
from sheaf_fmtl.algorithms.protocol.algorithm import State
from sheaf_fmtl.config.registry import MAP_MODES
from sheaf_fmtl.federation import Cohorts
from tests._baselines_problems import federation, regression_dataset, simulation

# Every algorithm (Sheaf-FMTL with the paper's maps), then Sheaf-FMTL with each other map mode.
CASES = [(name, {}) for name in sorted(ALGORITHMS)] + [
    ("sheaf-fmtl", {"maps": mode}) for mode in MAP_MODES if mode != "learned"
]
NAMES = sorted(ALGORITHMS)
IDS = [name + "".join(f"-{v}" for v in keys.values()) for name, keys in CASES]
DATA = regression_dataset(sizes=(10, 12, 14, 9))
FED = federation(DATA)
# The modes (and algorithms) that need more than linear models without feature ids: their problems.
PROBLEMS = {
    "features": federation(dataclasses.replace(DATA, features=tuple(np.arange(3) for _ in DATA.clients))),
    "aligned": federation(DATA, model="tests._baselines_problems:tiny_network"),
    "partial": federation(DATA, model="tests._baselines_problems:tiny_network"),  # a body and a head
}


def _fed(keys: dict[str, str], name: str = "") -> Cohorts:
    return PROBLEMS.get(keys.get("maps", name), FED)


def _tensors(state: State) -> dict[str, torch.Tensor]:
    """Every tensor of the state (thetas, maps, global models, ...) by a stable name."""
    out: dict[str, torch.Tensor] = {}
    for key, value in vars(state).items():
        values = value if isinstance(value, list) else [value]
        for k, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                out[f"{key}[{k}]"] = v
    return out


def test_registry_holds_every_algorithm_and_map_mode() -> None:
    assert {"sheaf-fmtl", "local", "dpsgd", "dfedu", "fedavg", "ditto", "pfedme", "perfedavg"} <= set(NAMES)
    assert {"fedavg-ft", "dpsgd-ft", "partial"} <= set(NAMES)
    modes = {"learned", "fixed", "redrawn", "features", "aligned", "proxy", "functional"}
    assert modes <= set(MAP_MODES) and {m for _, k in CASES for m in k.values()} == set(MAP_MODES) - {
        "learned"
    }


@pytest.mark.parametrize(("name", "keys"), CASES, ids=IDS)
def test_deterministic_under_seed(name: str, keys: dict[str, str]) -> None:
    runs = []
    for _ in range(2):
        sim = simulation(name, _fed(keys, name), batch_size=4, seed=11, local_steps=2, **keys)
        for _ in range(3):
            sim.step()
        runs.append(_tensors(sim.state))
    assert runs[0].keys() == runs[1].keys()
    for key in runs[0]:
        assert torch.equal(runs[0][key], runs[1][key]), key
    other = simulation(name, _fed(keys, name), batch_size=4, seed=12, local_steps=2, **keys)
    for _ in range(3):
        other.step()
    assert not torch.equal(other.state.thetas[0], runs[0]["thetas[0]"])


@pytest.mark.parametrize(("name", "keys"), CASES, ids=IDS)
def test_state_shapes_preserved(name: str, keys: dict[str, str]) -> None:
    sim = simulation(name, _fed(keys, name), batch_size=4, **keys)
    before = {k: (v.shape, v.dtype) for k, v in _tensors(sim.state).items()}
    assert [t.shape for t in sim.state.thetas] == [(c.size, c.dim) for c in _fed(keys, name).cohorts]
    for _ in range(2):
        sim.step()
    after = {k: (v.shape, v.dtype) for k, v in _tensors(sim.state).items() if k in before}
    assert after == before


@pytest.mark.parametrize(("name", "keys"), CASES, ids=IDS)
def test_objective_decreases(name: str, keys: dict[str, str]) -> None:
    steps = {"alpha": 0.05, "lam": 0.1, "eta": 0.01, "inner_lr": 0.05, "perfedavg_beta": 0.05}
    sim = simulation(name, _fed(keys, name), batch_size=0, **steps, **keys)
    start = sim.evaluate()["objective"]
    for _ in range(40):
        sim.step()
        assert sim.finite()
    end = sim.evaluate()["objective"]
    assert end < 0.5 * start, (start, end)
