"""Single-round updates of every baseline on a 3-client problem, against the equations of the source
papers written out with numpy (full-batch gradients, path graph 0 - 1 - 2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.baselines.server import ServerState
from sheaf_fmtl.algorithms.gossip.dpsgd import metropolis_weights
from sheaf_fmtl.sheaf.graph import make_graph
from tests._baselines_problems import (
    L2,
    client_arrays,
    federation,
    grads,
    path_graph,
    regression_dataset,
    simulation,
    thetas_np,
)

ALPHA, LAM = 0.05, 0.1
DATA = regression_dataset()  # sample counts 6, 8, 10
XY = client_arrays(DATA)
N_TRAIN = np.array([6.0, 8.0, 10.0])
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _start(algorithm: str, **overrides: object):  # noqa: ANN202
    sim = simulation(algorithm, federation(DATA), path_graph(3), **overrides)
    return sim, thetas_np(sim)


def _glob(sim) -> np.ndarray:  # noqa: ANN001
    assert isinstance(sim.state, ServerState) and sim.state.global_copies is not None
    return sim.state.global_copies.double().numpy()


def test_metropolis_weights_path_and_complete() -> None:
    w, self_w = metropolis_weights(path_graph(3))  # degrees 1, 2, 1
    np.testing.assert_allclose(w, [1 / 3] * 4)
    np.testing.assert_allclose(self_w, [2 / 3, 1 / 3, 2 / 3])
    w, self_w = metropolis_weights(make_graph("complete", 5))
    np.testing.assert_allclose(w, 0.2)
    np.testing.assert_allclose(self_w, 0.2)


@pytest.mark.parametrize("order", ["lian", "atc"])
def test_dpsgd_one_round(order: str) -> None:
    sim, x = _start("dpsgd", alpha=ALPHA, dpsgd_order=order)
    sim.step()
    w = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    g = grads(x, XY)
    expected = w @ x - ALPHA * g if order == "lian" else w @ (x - ALPHA * g)
    np.testing.assert_allclose(thetas_np(sim), expected, **TOL)


def test_dpsgd_extra_local_steps_come_first() -> None:
    sim, x = _start("dpsgd", alpha=ALPHA, local_steps=2)
    sim.step()
    w = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    x1 = x - ALPHA * grads(x, XY)
    np.testing.assert_allclose(thetas_np(sim), w @ x1 - ALPHA * grads(x1, XY), **TOL)


def test_dfedu_two_local_steps() -> None:
    sim, x = _start("dfedu", alpha=ALPHA, lam=LAM, local_steps=2)
    sim.step()
    adj = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], float)
    received = x.copy()  # neighbours' models as sent at the start of the round
    t = x.copy()
    for _ in range(2):
        coupling = adj.sum(1, keepdims=True) * t - adj @ received
        t = t - ALPHA * (grads(t, XY) + LAM * coupling)
    np.testing.assert_allclose(thetas_np(sim), t, **TOL)
    pen, energy = sim.algorithm.penalty(sim.state, sim.ctx)
    direct = ((t[0] - t[1]) ** 2).sum() + ((t[1] - t[2]) ** 2).sum()
    assert energy == pytest.approx(direct, rel=1e-5)
    assert pen == pytest.approx(0.5 * LAM * direct, rel=1e-5)


def test_fedavg_two_local_steps_weighted_by_samples() -> None:
    sim, w0 = _start("fedavg", alpha=ALPHA, local_steps=2)
    assert np.allclose(w0, w0[0])  # one global model to start from
    sim.step()
    local = w0.copy()
    for _ in range(2):
        local = local - ALPHA * grads(local, XY)
    avg = N_TRAIN @ local / N_TRAIN.sum()
    np.testing.assert_allclose(thetas_np(sim), np.tile(avg, (3, 1)), **TOL)


def test_ditto_two_local_steps() -> None:
    sim, v0 = _start("ditto", alpha=ALPHA, lam=LAM, local_steps=2)
    w0 = _glob(sim).copy()
    sim.step()
    w, v = w0.copy(), v0.copy()
    for _ in range(2):
        w = w - ALPHA * grads(w, XY)
    for _ in range(2):
        v = v - ALPHA * (grads(v, XY) + LAM * (v - w0))
    glob = N_TRAIN @ w / N_TRAIN.sum()
    np.testing.assert_allclose(thetas_np(sim), v, **TOL)
    np.testing.assert_allclose(_glob(sim), np.tile(glob, (3, 1)), **TOL)
    pen, energy = sim.algorithm.penalty(sim.state, sim.ctx)
    assert energy == pytest.approx(((v - glob) ** 2).sum(), rel=1e-5)


def test_pfedme_inner_and_outer_steps_and_beta_mixing() -> None:
    inner_lr, beta, lam = 0.03, 0.7, 2.0
    sim, _ = _start(
        "pfedme", alpha=ALPHA, lam=lam, local_steps=2, inner_steps=3, inner_lr=inner_lr, pfedme_beta=beta
    )
    w0 = _glob(sim).copy()
    sim.step()
    w, theta = w0.copy(), w0.copy()
    for _ in range(2):
        for _ in range(3):
            theta = theta - inner_lr * (grads(theta, XY) + lam * (theta - w))
        w = w - ALPHA * lam * (w - theta)
    glob = (1 - beta) * w0[0] + beta * w.mean(0)  # uniform mean over clients
    np.testing.assert_allclose(thetas_np(sim), theta, **TOL)
    np.testing.assert_allclose(_glob(sim), np.tile(glob, (3, 1)), **TOL)


def test_perfedavg_first_order_maml_and_personalisation() -> None:
    beta = 0.02
    sim, p0 = _start("perfedavg", alpha=ALPHA, local_steps=2, perfedavg_beta=beta)
    w0 = _glob(sim).copy()
    np.testing.assert_allclose(p0, w0 - ALPHA * grads(w0, XY), **TOL)  # evaluated: adapted by one step
    sim.step()
    w = w0.copy()
    for _ in range(2):
        u = w - ALPHA * grads(w, XY)
        w = w - beta * grads(u, XY)
    glob = np.tile(w.mean(0), (3, 1))
    np.testing.assert_allclose(_glob(sim), glob, **TOL)
    np.testing.assert_allclose(thetas_np(sim), glob - ALPHA * grads(glob, XY), **TOL)


def test_reference_gradient_matches_library_loss() -> None:
    """The numpy gradient used above is the gradient of the library's ``f_i`` (same loss, same l2)."""
    fed = federation(DATA)
    theta = torch.randn(3, fed.cohorts[0].dim)
    g, _ = fed.cohorts[0].gradients(theta, fed.cohorts[0].sample(0, torch.Generator()))
    expected = grads(theta.double().numpy(), XY, L2)
    np.testing.assert_allclose(g.double().numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["dpsgd", "dfedu", "fedavg", "ditto", "pfedme", "perfedavg"])
def test_baselines_need_one_model(algorithm: str) -> None:
    fed = federation(regression_dataset(features=(3, 4, 3)))
    with pytest.raises(ValueError, match="same model"):
        simulation(algorithm, fed, path_graph(3))
