"""Algorithm 1 against autograd on the objective Psi, and lam = 0 against local training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf.graph import make_graph
from tests.conftest import make_dataset


def _client_theta(sim, i: int) -> torch.Tensor:
    return sim.theta(i)


def _edge_maps(sim) -> dict[tuple[int, int], torch.Tensor]:
    return {ij: p.detach().clone() for ij, p in sim.maps().items()}


def _psi(dataset, graph, thetas, maps, lam: float, l2: float, classes: int) -> torch.Tensor:
    """Psi = sum_i f_i + lam/2 sum_{e={i,j}} ||P_ij theta_i - P_ji theta_j||^2, written out by hand:
    f_i = mean cross-entropy of softmax(W x + b) + l2/2 ||theta_i||^2, theta_i = [vec(W), b]."""
    total = torch.zeros((), dtype=torch.float64)
    for i, client in enumerate(dataset.clients):
        th = thetas[i].double()
        d_in = client.x_train.shape[1]
        w, b = th[: classes * d_in].view(classes, d_in), th[classes * d_in :]
        logits = torch.as_tensor(client.x_train).double() @ w.T + b
        total = total + F.cross_entropy(logits, torch.as_tensor(client.y_train)) + 0.5 * l2 * (th * th).sum()
    for i, j in graph.edges.tolist():
        r = maps[(i, j)].double() @ thetas[i].double() - maps[(j, i)].double() @ thetas[j].double()
        total = total + 0.5 * lam * (r * r).sum()
    return total


@pytest.mark.parametrize("mode, defer", [("literal", 1), ("compact", 1), ("compact", 2)])
def test_one_round_is_gradient_descent_on_psi(mode, defer):
    dataset = make_dataset([3, 5, 3, 4, 5, 3])
    cfg = RunConfig(
        batch_size=0,
        lam=0.3,
        alpha=0.1,
        eta=0.05,
        gamma=0.6,
        l2=0.01,
        message_mode=mode,
        map_defer=defer,
        maps="learned",
        local_epochs=0,
    )
    graph = make_graph("erdos-renyi", 6, p=0.6, seed=1)
    fed = build_federation(dataset, "logistic", l2=cfg.l2)
    sim = build_simulation(cfg, fed=fed, graph=graph)
    for _ in range(3):  # later rounds check the state carried between rounds (and a deferred fold)
        theta0 = [_client_theta(sim, i).detach().clone().requires_grad_(True) for i in range(6)]
        maps0 = {k: v.requires_grad_(True) for k, v in _edge_maps(sim).items()}
        sim.step()
        psi = _psi(dataset, graph, theta0, maps0, cfg.lam, cfg.l2, 3)
        grads = torch.autograd.grad(psi, theta0)
        expected_theta = [(t.double() - cfg.alpha * g).detach() for t, g in zip(theta0, grads, strict=True)]
        for i in range(6):
            torch.testing.assert_close(
                _client_theta(sim, i).double(), expected_theta[i], rtol=1e-5, atol=1e-6
            )
        # map step: P <- P - eta * grad_P Psi evaluated at the NEW thetas and the old maps
        maps_leaf = {k: v.detach().clone().requires_grad_(True) for k, v in maps0.items()}
        psi_new = _psi(dataset, graph, expected_theta, maps_leaf, cfg.lam, cfg.l2, 3)
        keys = list(maps_leaf)
        map_grads = torch.autograd.grad(psi_new, [maps_leaf[k] for k in keys])
        got = _edge_maps(sim)
        for k, g in zip(keys, map_grads, strict=True):
            torch.testing.assert_close(
                got[k].double(), (maps_leaf[k].double() - cfg.eta * g).detach(), rtol=1e-5, atol=1e-6
            )


def test_lambda_zero_gives_local_iterates_exactly():
    dataset = make_dataset([4, 4, 6, 6, 4], n=40)
    graph = make_graph("erdos-renyi", 5, p=0.7, seed=2)
    states = []
    for algorithm in ("sheaf-fmtl", "local"):
        cfg = RunConfig(algorithm=algorithm, lam=0.0, batch_size=7, alpha=0.2)
        sim = build_simulation(cfg, fed=build_federation(dataset, "logistic", l2=1e-3), graph=graph)
        for _ in range(6):
            sim.step()
        states.append([t.clone() for t in sim.state.thetas])
    for a, b in zip(*states, strict=True):
        assert torch.equal(a, b)


def test_lambda_positive_differs_from_local():
    """Guards the test above: with lam > 0 the iterates must move away from local training."""
    dataset = make_dataset([4, 4, 6, 6, 4], n=40)
    graph = make_graph("erdos-renyi", 5, p=0.7, seed=2)
    out = []
    for algorithm, lam in (("sheaf-fmtl", 0.5), ("local", 0.0)):
        sim = build_simulation(
            RunConfig(algorithm=algorithm, lam=lam, batch_size=7),
            fed=build_federation(dataset, "logistic"),
            graph=graph,
        )
        sim.step()
        out.append(sim.state.thetas[0].clone())
    assert not torch.allclose(out[0], out[1])
