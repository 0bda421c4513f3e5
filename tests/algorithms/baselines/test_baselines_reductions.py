"""Reductions between algorithms (the tests that would have caught FedU silently becoming
local training): Sheaf-FMTL with fixed identity maps is dFedU; ``lam = 0`` is local training;
D-PSGD on a complete graph is FedAvg."""

from __future__ import annotations

import pytest
import torch

from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.scenarios import conventional_fmtl
from tests._baselines_problems import (
    complete_graph,
    config,
    federation,
    path_graph,
    regression_dataset,
    simulation,
)

ROUNDS = 5


def _run(sim, rounds: int = ROUNDS) -> list[torch.Tensor]:  # noqa: ANN001
    history = []
    for _ in range(rounds):
        sim.step()
        history.append(sim.state.thetas[0].clone())
    return history


def _assert_same(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 1e-6) -> None:
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=atol, msg=f"round {k + 1}")


@pytest.mark.parametrize("local_steps", [1, 2])
def test_sheaf_with_identity_maps_is_dfedu(local_steps: int) -> None:
    """Same seed => same mini-batches (``ctx.batch_gen``) and the same initial thetas."""
    fed = federation(regression_dataset(sizes=(9, 12, 10, 7)))
    common = {"batch_size": 4, "lam": 0.3, "local_steps": local_steps}
    cfg = conventional_fmtl(config("sheaf-fmtl", **common))
    assert (cfg.gamma, cfg.eta, cfg.map_init) == (1.0, 0.0, "identity")
    sheaf = build_simulation(cfg, fed=fed, graph=path_graph(4))
    dfedu = simulation("dfedu", fed, path_graph(4), **common)
    torch.testing.assert_close(sheaf.state.thetas[0], dfedu.state.thetas[0])
    _assert_same(_run(sheaf), _run(dfedu))
    assert sheaf.algorithm.penalty(sheaf.state, sheaf.ctx) == pytest.approx(
        dfedu.algorithm.penalty(dfedu.state, dfedu.ctx), rel=1e-5
    )


def test_sheaf_with_scaled_identity_is_dfedu_with_weight() -> None:
    """``P_ij = sqrt(a) I`` gives ``a_ij = a``: the same iterates as dFedU with ``lam * a``."""
    fed = federation()
    fixed = {"gamma": 1.0, "eta": 0.0, "map_init": "identity", "map_scale": 2.0**0.5}
    sheaf = simulation("sheaf-fmtl", fed, batch_size=3, lam=0.2, **fixed)
    dfedu = simulation("dfedu", fed, batch_size=3, lam=0.4)
    _assert_same(_run(sheaf), _run(dfedu))


@pytest.mark.parametrize("local_steps", [1, 3])
def test_sheaf_with_zero_lambda_is_local(local_steps: int) -> None:
    fed = federation(regression_dataset(features=(3, 5, 3)))  # two model sizes: two cohorts
    sheaf = simulation("sheaf-fmtl", fed, batch_size=4, lam=0.0, eta=0.05, local_steps=local_steps)
    local = simulation("local", fed, batch_size=4, local_steps=local_steps)
    for _ in range(ROUNDS):
        sheaf.step()
        local.step()
    for a, b in zip(sheaf.state.thetas, local.state.thetas, strict=True):
        torch.testing.assert_close(a, b)


def _common_start(sim, start: torch.Tensor) -> None:  # noqa: ANN001
    sim.state.thetas = [start.clone()]


def test_dpsgd_on_complete_graph_averages_like_fedavg() -> None:
    """Lian's order, MH weights on a complete graph (= 1/N), equal sample counts, one local step, a
    common start: the average of the D-PSGD models after one round is FedAvg's global model. (Later
    rounds differ: D-PSGD's gradients are taken at the clients' own, unmixed, models.)"""
    fed = federation(regression_dataset(sizes=(8, 8, 8, 8)))
    graph = complete_graph(4)
    fedavg = simulation("fedavg", fed, graph)
    dpsgd = simulation("dpsgd", fed, graph)
    _common_start(dpsgd, fedavg.state.thetas[0])
    fedavg.step()
    dpsgd.step()
    torch.testing.assert_close(dpsgd.state.thetas[0].mean(0), fedavg.state.thetas[0][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("local_steps", [1, 2])
def test_dpsgd_adapt_then_combine_on_complete_graph_is_fedavg(local_steps: int) -> None:
    """``dpsgd_order=atc``: every client's model equals FedAvg's global model, round for round."""
    fed = federation(regression_dataset(sizes=(8, 8, 8, 8)))
    graph = complete_graph(4)
    fedavg = simulation("fedavg", fed, graph, batch_size=3, local_steps=local_steps)
    dpsgd = simulation("dpsgd", fed, graph, batch_size=3, local_steps=local_steps, dpsgd_order="atc")
    _common_start(dpsgd, fedavg.state.thetas[0])
    _assert_same(_run(dpsgd), _run(fedavg))


def test_dpsgd_on_sparse_graph_is_not_fedavg() -> None:
    """The reduction needs the complete graph (guards against a test that cannot fail)."""
    fed = federation(regression_dataset(sizes=(8, 8, 8, 8)))
    fedavg = simulation("fedavg", fed)
    dpsgd = simulation("dpsgd", fed, dpsgd_order="atc")  # path graph
    _common_start(dpsgd, fedavg.state.thetas[0])
    fedavg.step()
    dpsgd.step()
    assert not torch.allclose(dpsgd.state.thetas[0], fedavg.state.thetas[0], atol=1e-4)
