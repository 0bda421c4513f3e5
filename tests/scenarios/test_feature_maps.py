"""Feature-aware fixed maps (``scenarios.shared_feature_maps``) against a hand computation of the
energy they should give, ``sum_{e={i,j}} ||W_i[:, S] - W_j[:, S]||^2 + ||b_i - b_j||^2`` with
``S = F_i & F_j``, written from the ``nn.Linear`` layout (not from the library's maps)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.runtime.engine.simulate import Simulation
from sheaf_fmtl.scenarios import shared_feature_maps
from sheaf_fmtl.sheaf.graph import make_graph

# Client i sees these global features (its columns, in this order). Clients 0 and 2, and 1 and 2,
# share none: their edge couples the biases only. Clients 3 and 4 have equal widths but different
# features (one cohort, different maps); client 4's columns are not in increasing order.
FEATURES = ([0, 1, 2], [2, 3], [4, 5], [0, 3, 5], [5, 1, 4])
CLASSES = 3
LAM, ALPHA = 0.4, 0.1


def _dataset(features=FEATURES, seed: int = 0) -> FederatedDataset:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(6, CLASSES))
    clients = []
    for k, cols in enumerate(features):
        n = 8 + 3 * k
        x = rng.normal(size=(n + 5, 6)).astype(np.float32)
        y = np.argmax(x @ w + 0.5 * rng.normal(size=(n + 5, CLASSES)), axis=1).astype(np.int64)
        clients.append(ClientSplit(x[:n, cols], y[:n], x[n:, cols], y[n:]))
    return FederatedDataset("toy-features", "classification", CLASSES, tuple(clients))


def _config(**overrides: object) -> RunConfig:
    base: dict[str, object] = {
        "algorithm": "sheaf-fmtl",
        "eta": 0.0,
        "lam": LAM,
        "alpha": ALPHA,
        "batch_size": 4,
        "local_epochs": 1,
        "graph": "complete",
        "seed": 2,
    }
    return RunConfig().replace(**{**base, **overrides})


def _build(features=FEATURES, **overrides: object) -> Simulation:  # noqa: ANN001
    return shared_feature_maps(_config(**overrides), _dataset(features), features)


def _client_thetas(sim: Simulation) -> list[torch.Tensor]:
    return [sim.theta(i).double().clone() for i in range(sim.ctx.graph.num_nodes)]


def _set_thetas(sim: Simulation, thetas: list[torch.Tensor]) -> None:
    fed = sim.ctx.fed
    stacks = [t.clone() for t in sim.state.thetas]
    for i, t in enumerate(thetas):
        stacks[fed.cohort_of[i]][fed.position[i]] = t.to(stacks[0].dtype)
    sim.state.thetas = stacks


def _random_thetas(sim: Simulation, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in _client_thetas(sim)]


def _hand_energy(thetas: list[torch.Tensor], edges: np.ndarray, features=FEATURES) -> torch.Tensor:  # noqa: ANN001
    """``sum_{e={i,j}} ||W_i[:, S] - W_j[:, S]||^2 + ||b_i - b_j||^2``, ``theta = [W row-major, b]``."""
    total = thetas[0].new_zeros(())
    for i, j in edges.tolist():
        fi, fj = list(features[i]), list(features[j])
        wi = thetas[i][: CLASSES * len(fi)].view(CLASSES, len(fi))
        wj = thetas[j][: CLASSES * len(fj)].view(CLASSES, len(fj))
        bi, bj = thetas[i][CLASSES * len(fi) :], thetas[j][CLASSES * len(fj) :]
        shared = sorted(set(fi) & set(fj))
        ci, cj = [fi.index(g) for g in shared], [fj.index(g) for g in shared]
        total = total + ((wi[:, ci] - wj[:, cj]) ** 2).sum() + ((bi - bj) ** 2).sum()
    return total


def test_edge_stalks_are_the_shared_weights_and_the_bias() -> None:
    sim = _build()
    graph = sim.ctx.graph
    assert graph.num_edges == 10
    expected = [CLASSES * (len(set(FEATURES[i]) & set(FEATURES[j])) + 1) for i, j in graph.edges.tolist()]
    assert sim.state.layout.edge_dims.tolist() == expected
    assert min(expected) == CLASSES  # edges {0, 2} and {1, 2}: the biases only


def test_energy_is_the_hand_computed_penalty_on_random_thetas() -> None:
    sim = _build()
    for seed in range(3):
        thetas = _random_thetas(sim, seed)
        _set_thetas(sim, thetas)
        penalty, energy = sim.algorithm.penalty(sim.state, sim.ctx)
        direct = float(_hand_energy(thetas, sim.ctx.graph.edges))
        assert direct > 0 and energy == pytest.approx(direct, rel=1e-5)
        assert penalty == pytest.approx(0.5 * LAM * direct, rel=1e-5)


@pytest.mark.parametrize("epochs", [1, 0])
def test_coupling_step_is_a_gradient_step_on_the_hand_energy(epochs: int) -> None:
    """One round with ``lam`` minus the same round with ``lam = 0`` (same data, batches and start)
    is ``-alpha lam grad(E/2)`` at the thetas the coupling step sees: after the local epoch
    (``local_epochs=1``), or at the start (Algorithm 1, ``local_epochs=0``, full batch)."""
    overrides: dict[str, object] = {"local_epochs": epochs}
    if epochs == 0:
        overrides["batch_size"] = 0
    coupled, uncoupled = _build(**overrides), _build(lam=0.0, **overrides)
    start = _random_thetas(coupled, 7)
    for sim in (coupled, uncoupled):
        _set_thetas(sim, start)
        sim.step()
    at = start if epochs == 0 else _client_thetas(uncoupled)  # where the coupling step was taken
    params = [t.clone().requires_grad_(True) for t in at]
    grads = torch.autograd.grad(0.5 * _hand_energy(params, coupled.ctx.graph.edges), params)
    moved = [a - b for a, b in zip(_client_thetas(coupled), _client_thetas(uncoupled), strict=True)]
    assert any(float(g.abs().max()) > 1e-2 for g in grads)
    for i, (m, g) in enumerate(zip(moved, grads, strict=True)):
        torch.testing.assert_close(m, -ALPHA * LAM * g, rtol=1e-4, atol=1e-5, msg=f"client {i}")


def test_one_round_sends_one_edge_stalk_vector_per_neighbour() -> None:
    sim = _build()
    sim.step()
    assert sim.transport.bits == 2 * int(sim.state.layout.edge_dims.sum()) * 32  # float32, both ends


def test_every_feature_seen_gives_the_dfedu_penalty() -> None:
    full = tuple([0, 1, 2, 3, 4, 5] for _ in range(4))
    sim = _build(full)
    thetas = _random_thetas(sim, 1)
    _set_thetas(sim, thetas)
    direct = sum(float(((thetas[i] - thetas[j]) ** 2).sum()) for i, j in sim.ctx.graph.edges.tolist())
    assert sim.algorithm.penalty(sim.state, sim.ctx)[1] == pytest.approx(direct, rel=1e-5)


def test_takes_a_graph_and_checks_stability_on_its_own_maps() -> None:
    path = make_graph("complete", 5)
    sim = shared_feature_maps(_config(), _dataset(), FEATURES, graph=path)
    assert sim.state.lambda_max is not None
    # selection maps: lambda_max(L_F) <= the graph Laplacian's (5 on K_5)
    assert 0 < sim.state.lambda_max <= 5 + 1e-6
    with pytest.raises(ConfigError, match="unstable"):
        _build(alpha=1.0, lam=1.0)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="eta must be 0"):
        _build(eta=0.01)
    with pytest.raises(ValueError, match="one feature list per client"):
        shared_feature_maps(_config(), _dataset(), FEATURES[:4])
    with pytest.raises(ValueError, match="client 1 has 2 input features"):
        shared_feature_maps(_config(), _dataset(), ([0, 1, 2], [2, 3, 4], [4, 5], [0, 3, 5], [5, 1, 4]))
    with pytest.raises(ValueError, match="distinct"):
        shared_feature_maps(_config(), _dataset(), ([0, 1, 1], [2, 3], [4, 5], [0, 3, 5], [5, 1, 4]))
    with pytest.raises(ValueError, match="nodes"):
        shared_feature_maps(_config(), _dataset(), FEATURES, graph=make_graph("complete", 4))
