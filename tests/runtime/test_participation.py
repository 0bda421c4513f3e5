"""Client sampling (``clients_per_round``): who takes part, what the server averages, what the round
costs and counts, and that the draw is the same on one process and two and after a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl import ConfigError, RunConfig
from sheaf_fmtl.runtime.engine.participation import Participation
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.runtime.run.loop import execute
from tests.helpers import StopAt

from .test_layouts import _assert_same, _config, _on_two

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

PROBLEM: dict[str, Any] = {"dataset": "synthetic", "clients": 10, "rounds": 3, "eval_every": 3}
SERVER = ("fedavg", "fedavg-ft", "ditto", "pfedme", "perfedavg")


def test_the_draw_is_seeded_and_the_same_for_any_subset_of_ids() -> None:
    plan = Participation(seed=3, per_round=4, clients=50)
    chosen = plan.chosen(7)
    assert len(chosen) == 4 and np.array_equal(chosen, np.sort(chosen))
    assert np.array_equal(chosen, Participation(3, 4, 50).chosen(7))  # a function of (seed, round) alone
    assert not np.array_equal(chosen, plan.chosen(8))
    assert np.array_equal(np.flatnonzero(~plan.left_out(7)), chosen)


@pytest.mark.parametrize("algorithm", [*SERVER, "sheaf-fmtl", "dfedu", "dpsgd"])
def test_every_client_a_round_is_todays_round_bit_for_bit(algorithm: str) -> None:
    keys = {**PROBLEM, "algorithm": algorithm}
    today = sheaf_fmtl.run(**keys)
    every = sheaf_fmtl.run(**keys, clients_per_round=PROBLEM["clients"])
    assert all(torch.equal(a, b) for a, b in zip(today.thetas, every.thetas, strict=True))
    assert every.summary["transmitted_bits"] == today.summary["transmitted_bits"]


@pytest.mark.parametrize("algorithm", [*SERVER[1:], "sheaf-fmtl", "dfedu", "dpsgd"])
def test_only_the_participants_move_and_send(algorithm: str) -> None:
    """The models a client keeps (personal, fine-tuned, decentralised) move for the participants
    only; FedAvg's, the server's model, below."""
    config = RunConfig(**PROBLEM, algorithm=algorithm, clients_per_round=4)
    sim = build_simulation(config)
    before = [t.clone() for t in sim.state.thetas]
    sim.step()
    moved = torch.cat([(a - b).abs().sum(1) > 0 for a, b in zip(sim.state.thetas, before, strict=True)])
    chosen = Participation(config.seed, 4, 10).chosen(1)
    order = np.concatenate([c.clients for c in sim.ctx.fed.cohorts])
    assert sorted(order[moved.numpy()].tolist()) == chosen.tolist()
    assert sim.transport.faults.counts()["dropped_messages"] == 0  # not drawn: not a lost message


def test_one_fedavg_round_is_the_participants_weighted_average(tmp_path: Path) -> None:
    """One round of FedAvg (one full-batch step) against numpy: each participant's gradient step of
    its L2-regularised cross-entropy, averaged with weights ``n_i`` over the participants only."""
    config = RunConfig(**PROBLEM, algorithm="fedavg", clients_per_round=3, local_steps=1, batch_size=0)
    sim = build_simulation(config)
    cohort = sim.ctx.fed.cohorts[0]
    assert cohort.task == "classification" and cohort.names == ["1.weight", "1.bias"]
    w0 = sim.state.global_copies[0].double().numpy()
    chosen = Participation(config.seed, 3, 10).chosen(1)
    sim.step()
    k, f = cohort.shapes[0]
    updates, sizes = [], []
    for i in chosen:
        n = int(cohort.n_train[i])
        x = cohort.x_train[i, :n].reshape(n, -1).double().numpy()
        y = np.eye(k)[cohort.y_train[i, :n].numpy()]
        w, b = w0[: k * f].reshape(k, f), w0[k * f :]
        z = x @ w.T + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = np.concatenate([((p - y).T @ x / n).ravel(), (p - y).mean(0)]) + config.l2 * w0
        updates.append(w0 - config.alpha * grad)
        sizes.append(n)
    expected = np.average(np.stack(updates), axis=0, weights=np.array(sizes, float))
    got = sim.state.global_copies.double().numpy()
    np.testing.assert_allclose(got[chosen[0]], expected, rtol=1e-5, atol=1e-6)
    assert np.array_equal(got, np.broadcast_to(got[0], got.shape))  # every client holds the global model
    assert torch.equal(sim.state.thetas[0], sim.state.global_copies)  # (what FedAvg scores)
    bits = sim.transport.bits
    assert bits == 2 * 3 * w0.size * 32  # the participants' rows up and the average down


@pytest.mark.parametrize("algorithm", ["fedavg", "ditto", "dfedu", "sheaf-fmtl"])
def test_two_processes_draw_one_process_participants(algorithm: str, tmp_path: Path) -> None:
    config = _config(algorithm, clients_per_round=3)
    one = execute(config, None)
    summary, final = _on_two(config, tmp_path / "two")
    assert summary["clients_per_process"] == [4, 3]
    _assert_same(one, summary, final, tmp_path / "two")


@pytest.mark.parametrize("algorithm", ["fedavg", "ditto"])
def test_a_resumed_run_draws_the_same_participants(algorithm: str, tmp_path: Path) -> None:
    keys = {**PROBLEM, "algorithm": algorithm, "rounds": 6, "clients_per_round": 3}
    whole = sheaf_fmtl.run(**keys)

    sheaf_fmtl.run(**keys, out=tmp_path / "run", callbacks=[StopAt(3)])
    resumed = sheaf_fmtl.run(resume=tmp_path / "run")
    assert resumed.summary["resumed_from_round"] == 3
    assert all(torch.equal(a, b) for a, b in zip(whole.thetas, resumed.thetas, strict=True))
    assert resumed.summary["transmitted_bits"] == whole.summary["transmitted_bits"]


def test_flops_count_the_participants_of_the_server_baselines() -> None:
    full = sheaf_fmtl.run(**PROBLEM, algorithm="fedavg", local_epochs=1)
    part = sheaf_fmtl.run(**PROBLEM, algorithm="fedavg", local_epochs=1, clients_per_round=2)
    assert 0 < part.summary["flops_local"] < full.summary["flops_local"] / 2


def test_more_clients_a_round_than_clients_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        build_simulation(RunConfig(**PROBLEM, clients_per_round=11))
    text = str(err.value)
    assert "\n" not in text and "clients_per_round" in text and "11" in text and "10 clients" in text
