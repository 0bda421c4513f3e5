"""The paper's special cases ("Special Cases") as fixed-map Sheaf-FMTL runs, against direct
implementations of the objectives they reduce to (autograd on the objective, not the library)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.runtime.engine.simulate import Simulation
from sheaf_fmtl.scenarios import hybrid_fl, linear_selection, personalised_fl, with_server_node

from .._baselines_problems import L2, client_arrays, config, regression_dataset


def _client_thetas(sim: Simulation) -> list[torch.Tensor]:
    return [sim.theta(i).double().clone() for i in range(sim.ctx.graph.num_nodes)]


def _f(theta: torch.Tensor, xy: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
    """The local loss written out: ``mean (X~ theta - y)^2 + l2/2 ||theta||^2``, 0 without data."""
    x, y = (torch.as_tensor(a) for a in xy)
    if len(y) == 0:
        return theta.sum() * 0.0
    return ((x @ theta - y) ** 2).mean() + 0.5 * L2 * (theta**2).sum()


def _gradient_step(thetas: list[torch.Tensor], objective, alpha: float) -> list[torch.Tensor]:  # noqa: ANN001
    params = [t.clone().requires_grad_(True) for t in thetas]
    grads = torch.autograd.grad(objective(params), params)
    return [(p - alpha * g).detach() for p, g in zip(params, grads, strict=True)]


# ------------------------------------------------------------------------------ personalised FL

ALPHA, LAM = 0.05, 0.5


def _personalised_objective(data: list[tuple[np.ndarray, np.ndarray]], lam: float):  # noqa: ANN202
    """Hanzely et al. Eq. (2), ``theta_bar`` a variable: ``sum_i f_i + lam/2 sum_i ||theta_i - bar||^2``."""

    def objective(params: list[torch.Tensor]) -> torch.Tensor:
        bar, models = params[0], params[1:]
        return sum(_f(t, xy) + 0.5 * lam * ((t - bar) ** 2).sum() for t, xy in zip(models, data, strict=True))

    return objective


def test_personalised_fl_iterates_are_gradient_steps_on_hanzely_objective() -> None:
    dataset = regression_dataset(sizes=(6, 8, 10, 7))
    sim = personalised_fl(config("sheaf-fmtl", alpha=ALPHA, lam=LAM), dataset)
    assert sim.ctx.fed.num_clients == 5 and int(sim.ctx.fed.cohorts[0].n_train[0]) == 0  # node 0: no data
    assert sim.ctx.graph.edges.tolist() == [[0, 1], [0, 2], [0, 3], [0, 4]]
    objective = _personalised_objective(client_arrays(dataset), LAM)
    direct = _client_thetas(sim)
    for k in range(10):
        sim.step()
        direct = _gradient_step(direct, objective, ALPHA)
        for i, (a, b) in enumerate(zip(_client_thetas(sim), direct, strict=True)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"round {k + 1}, node {i}")
    pen, energy = sim.algorithm.penalty(sim.state, sim.ctx)
    thetas = _client_thetas(sim)
    assert energy == pytest.approx(sum(float(((t - thetas[0]) ** 2).sum()) for t in thetas[1:]), rel=1e-5)


def test_personalised_fl_converges_to_the_personalised_optimum() -> None:
    """The objective is quadratic: its minimiser solves one linear system; the server's model is
    then the mean of the clients' (``f_0 = 0``)."""
    dataset = regression_dataset(sizes=(6, 8, 10))
    sim = personalised_fl(config("sheaf-fmtl", alpha=0.2, lam=LAM), dataset)
    data = client_arrays(dataset)
    n, d = len(data), data[0][0].shape[1]
    h = np.zeros(((n + 1) * d, (n + 1) * d))
    rhs = np.zeros((n + 1) * d)
    eye = np.eye(d)
    h[:d, :d] = n * LAM * eye
    for i, (x, y) in enumerate(data, start=1):
        s = slice(i * d, (i + 1) * d)
        h[s, s] = 2 / len(y) * x.T @ x + (L2 + LAM) * eye
        h[s, :d] = h[:d, s] = -LAM * eye
        rhs[s] = 2 / len(y) * x.T @ y
    optimum = np.linalg.solve(h, rhs).reshape(n + 1, d)
    for _ in range(500):
        sim.step()
    got = torch.stack(_client_thetas(sim)).numpy()
    np.testing.assert_allclose(got, optimum, atol=2e-4)
    np.testing.assert_allclose(optimum[0], optimum[1:].mean(0), atol=1e-10)


def test_server_node_has_no_loss() -> None:
    ds = with_server_node(regression_dataset())
    assert ds.num_clients == 4 and len(ds.clients[0].y_train) == 0
    sim = personalised_fl(config("sheaf-fmtl"), regression_dataset())
    assert float(sim.ctx.fed.cohorts[0].train_loss(sim.state.thetas[0])[0]) == 0.0
    sim.step()
    ev = sim.evaluate()  # the data-less server is left out of the mean test metric
    assert ev["per_client"][0] is None and len(ev["per_client"]) == 4
    assert ev["test_metric"] == pytest.approx(sum(ev["per_client"][1:]) / 3)


# ------------------------------------------------------------------------------ hybrid FL

FEATURES = ([0, 1], [1, 2, 3], [3, 0])  # client i's columns are these server features, in order


def _hybrid_dataset(seed: int = 1) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=4)

    def split(n: int, cols: list[int]) -> ClientSplit:
        x = rng.normal(size=(n + 3, 4)).astype(np.float32)
        y = (x @ w + 0.2 * rng.normal(size=n + 3)).astype(np.float32)
        return ClientSplit(x[:n, cols], y[:n], x[n:, cols], y[n:])

    server = split(10, [0, 1, 2, 3])
    clients = tuple(split(6 + k, f) for k, f in enumerate(FEATURES))
    return FederatedDataset("hybrid", "regression", 0, (server, *clients))


def _pruned(theta0: torch.Tensor, cols: list[int]) -> torch.Tensor:
    """``Pi_i theta_0`` written from the linear model's layout ``[w_1..w_4, b]``."""
    return torch.cat([theta0[cols], theta0[4:]])


def _hybrid_energy(thetas: list[torch.Tensor]) -> torch.Tensor:
    """``sum_i ||theta_i - Pi_i theta_0||^2`` (Zhang et al. 2022, Eq. 6 regulariser)."""
    return sum(((thetas[i] - _pruned(thetas[0], f)) ** 2).sum() for i, f in enumerate(FEATURES, 1))


def test_hybrid_fl_energy_is_distance_to_pruned_server_model() -> None:
    sim = hybrid_fl(config("sheaf-fmtl", lam=0.3), _hybrid_dataset(), FEATURES)
    for _ in range(3):
        thetas = _client_thetas(sim)
        direct = float(_hybrid_energy(thetas))
        pen, energy = sim.algorithm.penalty(sim.state, sim.ctx)
        assert energy == pytest.approx(direct, rel=1e-5) and direct > 0
        assert pen == pytest.approx(0.5 * 0.3 * direct, rel=1e-5)
        sim.step()


def test_hybrid_fl_iterates_are_gradient_steps_on_hybrid_objective() -> None:
    lam, alpha = 0.3, 0.05
    dataset = _hybrid_dataset()
    sim = hybrid_fl(config("sheaf-fmtl", lam=lam, alpha=alpha), dataset, FEATURES)
    data = client_arrays(dataset)

    def objective(params: list[torch.Tensor]) -> torch.Tensor:
        loss = sum(_f(t, xy) for t, xy in zip(params, data, strict=True))
        return loss + 0.5 * lam * _hybrid_energy(params)

    direct = _client_thetas(sim)
    for _ in range(5):
        sim.step()
        direct = _gradient_step(direct, objective, alpha)
    for a, b in zip(_client_thetas(sim), direct, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_linear_selection_matches_logistic_parameter_layout() -> None:
    server, client = nn.Linear(5, 3), nn.Linear(2, 3)
    cols = [4, 1]
    with torch.no_grad():
        client.weight.copy_(server.weight[:, cols])
        client.bias.copy_(server.bias)
    flat = lambda m: torch.cat([p.reshape(-1) for p in m.parameters()]).detach()  # noqa: E731
    idx = linear_selection(cols, 5, 3)
    torch.testing.assert_close(torch.eye(18)[idx] @ flat(server), flat(client))
    with pytest.raises(ValueError):
        linear_selection([1, 1], 5, 3)


def test_hybrid_fl_rejects_mismatched_feature_lists() -> None:
    with pytest.raises(ValueError, match="selects"):
        hybrid_fl(config("sheaf-fmtl"), _hybrid_dataset(), ([0, 1], [1, 2], [3, 0]))
