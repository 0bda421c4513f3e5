"""FedAvg+FT and D-PSGD+FT: the shared models are FedAvg's and D-PSGD's number for number (fine-tuning
never feeds back, nor draws from their batch streams), the scored models are the shared ones after
``finetune_epochs`` passes of SGD written out with numpy (full batch, and mini-batches in the order
the fine-tuning streams give), the bits are the base algorithm's, the fine-tuning gradients are in
``flops_local``, and fine-tuning beats local training on related clients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.algorithms.baselines.dpsgd_ft import TunedGossipState
from sheaf_fmtl.algorithms.baselines.finetune import client_seeds
from sheaf_fmtl.algorithms.baselines.server import ServerState
from sheaf_fmtl.metrics.flops import per_sample_flops
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from tests._baselines_problems import (
    client_arrays,
    federation,
    grad_f,
    path_graph,
    regression_dataset,
    simulation,
)

DATA = regression_dataset(sizes=(6, 8, 10, 9))
XY = client_arrays(DATA)
FED = federation(DATA)
TOL = {"rtol": 1e-5, "atol": 1e-6}
# The shared model's protocols: mini-batch epochs, local steps (lian / atc), an optimizer, a compressor.
FEDAVG_CASES = {
    "epochs": {"local_epochs": 1, "batch_size": 4},
    "steps": {"local_steps": 3, "batch_size": 4},
    "momentum": {"local_epochs": 1, "batch_size": 4, "optimizer": "momentum"},
}
DPSGD_CASES = {
    "lian": {"local_steps": 2, "batch_size": 4},
    "atc-epochs": {"local_epochs": 1, "batch_size": 4, "dpsgd_order": "atc"},
    "top-k": {"local_epochs": 1, "batch_size": 4, "compressor": "top-k", "compression": 0.5},
}


def _shared(sim) -> torch.Tensor:  # noqa: ANN001
    """The models the federation goes on with: FedAvg's global copies, D-PSGD's ``x_i``."""
    state = sim.state
    if isinstance(state, ServerState):
        return state.global_copies
    return state.models if isinstance(state, TunedGossipState) else state.thetas[0]


@pytest.mark.parametrize(
    ("base", "keys"),
    [("fedavg", k) for k in FEDAVG_CASES.values()] + [("dpsgd", k) for k in DPSGD_CASES.values()],
    ids=[f"fedavg-{k}" for k in FEDAVG_CASES] + [f"dpsgd-{k}" for k in DPSGD_CASES],
)
def test_the_shared_models_are_the_base_algorithms_round_for_round(base: str, keys: dict) -> None:
    plain = simulation(base, FED, path_graph(4), seed=5, **keys)
    tuned = simulation(f"{base}-ft", FED, path_graph(4), seed=5, finetune_epochs=2, **keys)
    assert torch.equal(_shared(tuned), _shared(plain))
    for _ in range(4):
        plain.step()
        tuned.step()
        assert torch.equal(_shared(tuned), _shared(plain))
        assert tuned.transport.bits == plain.transport.bits > 0
        assert not torch.equal(tuned.state.thetas[0], _shared(tuned))  # the scored models are others


def _full_batch_tuned(shared: np.ndarray, epochs: int, alpha: float) -> np.ndarray:
    """``epochs`` full-batch gradient steps from each client's shared model (one step a pass)."""
    out = shared.copy()
    for _ in range(epochs):
        out = np.stack([t - alpha * grad_f(t, xy) for t, xy in zip(out, XY, strict=True)])
    return out


@pytest.mark.parametrize("algorithm", ["fedavg-ft", "dpsgd-ft"])
def test_the_scored_models_are_the_shared_ones_after_full_batch_passes(algorithm: str) -> None:
    sim = simulation(algorithm, FED, path_graph(4), batch_size=0, local_steps=2, finetune_epochs=3)
    for k in range(3):
        if k:
            sim.step()
        shared = _shared(sim).double().numpy()
        expected = _full_batch_tuned(shared, 3, 0.05)
        np.testing.assert_allclose(sim.state.thetas[0].double().numpy(), expected, **TOL)


def test_the_mini_batches_walk_each_clients_own_fine_tuning_stream() -> None:
    """Batches of 3 in the order of each client's keys from its seed for that round (``client_seeds``):
    two passes over its own samples, a shorter last batch (``DataLoader(shuffle=True)`` per client)."""
    b, epochs, alpha, seed = 3, 2, 0.05, 3
    sim = simulation("fedavg-ft", FED, path_graph(4), batch_size=b, finetune_epochs=epochs, local_epochs=1)
    sim.step()  # fine-tuning number 1 (0: at initialisation)
    shared = sim.state.global_copies.double().numpy()
    expected = []
    for client, (theta, (x, y)) in enumerate(zip(shared, XY, strict=True)):
        gen = torch.Generator().manual_seed(int(client_seeds(seed, 1, np.arange(4))[client]))
        for _ in range(epochs):
            order = torch.rand(len(y), generator=gen).argsort().numpy()
            for s in range(math.ceil(len(y) / b)):
                rows = order[s * b : (s + 1) * b]
                theta = theta - alpha * grad_f(theta, (x[rows], y[rows]))
        expected.append(theta)
    np.testing.assert_allclose(sim.state.thetas[0].double().numpy(), np.stack(expected), **TOL)


@pytest.mark.parametrize("algorithm", ["fedavg-ft", "dpsgd-ft"])
def test_a_client_that_sits_out_keeps_its_scored_and_shared_models(algorithm: str) -> None:
    sim = simulation(algorithm, FED, path_graph(4), batch_size=4, local_epochs=1, drop_prob=0.5, seed=1)
    for _ in range(3):
        before = (sim.state.thetas[0].clone(), _shared(sim).clone())
        sim.step()
        out = torch.as_tensor(sim.transport.faults._out, dtype=torch.bool)
        assert torch.equal(sim.state.thetas[0][out], before[0][out])
        assert torch.equal(_shared(sim)[out], before[1][out])


SMALL = {"dataset": "synthetic", "clients": 6, "rounds": 3, "eval_every": 3, "batch_size": 0}


def test_flops_local_counts_the_fine_tuning_gradients() -> None:
    """Full batch: each fine-tuning pass is one gradient over every training sample, one fine-tuning
    after each round (the one at initialisation comes before the run counts, like the rest of
    start-up)."""
    epochs = 2
    plain = sheaf_fmtl.run(algorithm="fedavg", **SMALL)
    tuned = sheaf_fmtl.run(algorithm="fedavg-ft", finetune_epochs=epochs, **SMALL)
    cohort = build_simulation(tuned.config).ctx.fed.cohorts[0]
    per = per_sample_flops(cohort.module, tuple(cohort.x_train.shape[2:]), cohort.task)
    extra = SMALL["rounds"] * epochs * int(cohort.n_train.sum()) * per
    assert tuned.summary["flops_local"] - plain.summary["flops_local"] == extra > 0
    assert tuned.summary["flops_aggregation"] == plain.summary["flops_aggregation"]
    assert tuned.summary["transmitted_bits"] == plain.summary["transmitted_bits"]


# One cluster of related tasks, every feature seen: few samples per client, so sharing pays.
RELATED = {
    "dataset": "synthetic-clusters",
    "data": {"homogeneous": True, "groups": 1},
    "rounds": 20,
    "eval_every": 20,
    "seed": 4,
}


@pytest.mark.parametrize("algorithm", ["fedavg-ft", "dpsgd-ft"])
def test_fine_tuning_learns_above_local_training_on_related_clients(algorithm: str) -> None:
    local = sheaf_fmtl.run(algorithm="local", **RELATED).summary["final"]
    tuned = sheaf_fmtl.run(algorithm=algorithm, **RELATED).summary["final"]
    assert tuned > local + 0.05, (tuned, local)


def test_the_client_seeds_are_distinct_per_client_and_round_and_fixed_by_the_seed() -> None:
    ids = np.arange(1000)
    seeds = np.stack([client_seeds(seed, draw, ids) for seed in (0, 1) for draw in (0, 1, 2)])
    assert len(np.unique(seeds)) == seeds.size and (seeds < 2**63).all()
    np.testing.assert_array_equal(client_seeds(1, 2, ids[500:]), seeds[5, 500:])  # a shard's own ids
