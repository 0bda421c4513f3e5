"""Small strongly convex problems for the algorithm tests (linear regression, a few clients), and a
numpy reference of their gradients written from the loss, independent of the library."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import Cohorts, build_federation
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.sheaf.graph import ClientGraph, make_graph

L2 = 1e-2


def regression_dataset(
    sizes: Sequence[int] = (6, 8, 10), features: int | Sequence[int] = 3, seed: int = 0, n_test: int = 4
) -> FederatedDataset:
    """Clients with related linear tasks ``y = x w_i + 0.5 + noise``; ``features`` per client."""
    rng = np.random.default_rng(seed)
    feats = [features] * len(sizes) if isinstance(features, int) else list(features)
    shared = rng.normal(size=max(feats))
    clients = []
    for n, f in zip(sizes, feats, strict=True):
        w = shared[:f] + 0.3 * rng.normal(size=f)
        x = rng.normal(size=(n + n_test, f)).astype(np.float32)
        y = (x @ w + 0.5 + 0.1 * rng.normal(size=n + n_test)).astype(np.float32)
        clients.append(ClientSplit(x[:n], y[:n], x[n:], y[n:]))
    return FederatedDataset("toy-regression", "regression", 0, tuple(clients))


def federation(dataset: FederatedDataset | None = None, l2: float = L2, model: str = "linear") -> Cohorts:
    return build_federation(dataset or regression_dataset(), model, l2=l2)


def tiny_network(input_shape: tuple[int, ...], num_outputs: int) -> torch.nn.Module:
    """A two-layer network (``model = tests._baselines_problems:tiny_network``): what ``maps=aligned``
    couples (layers of neural networks)."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(int(np.prod(input_shape)), 4),
        torch.nn.Tanh(),
        torch.nn.Linear(4, num_outputs),
    )


def path_graph(n: int = 3) -> ClientGraph:
    return ClientGraph(n, np.array([[i, i + 1] for i in range(n - 1)]))


def complete_graph(n: int) -> ClientGraph:
    return make_graph("complete", n)


def config(algorithm: str, **overrides: object) -> RunConfig:
    base: dict[str, object] = {
        "algorithm": algorithm,
        "batch_size": 0,
        "alpha": 0.05,
        "lam": 0.1,
        "eta": 0.01,
        "maps": "learned",
        "local_epochs": 0,
        "l2": L2,
        "message_mode": "literal",
        "seed": 3,
    }
    return RunConfig().replace(**{**base, **overrides})


def simulation(
    algorithm: str, fed: Cohorts | None = None, graph: ClientGraph | None = None, **overrides: object
) -> Simulation:
    fed = fed or federation()
    graph = graph or path_graph(fed.num_clients)
    return build_simulation(config(algorithm, **overrides), fed=fed, graph=graph)


def client_arrays(dataset: FederatedDataset) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per client ``(X~ = [X, 1] float64, y float64)``: the linear model's design matrix."""
    out = []
    for c in dataset.clients:
        x = c.x_train.astype(np.float64).reshape(len(c.x_train), -1)
        out.append((np.hstack([x, np.ones((len(x), 1))]), c.y_train.astype(np.float64)))
    return out


def grad_f(theta: np.ndarray, xy: tuple[np.ndarray, np.ndarray], l2: float = L2) -> np.ndarray:
    """``grad f(theta)`` of ``f = mean (X~ theta - y)^2 + l2/2 ||theta||^2`` (0 for a client without data)."""
    x, y = xy
    if len(y) == 0:
        return np.zeros_like(theta)
    return 2.0 / len(y) * x.T @ (x @ theta - y) + l2 * theta


def grads(thetas: np.ndarray, data: list[tuple[np.ndarray, np.ndarray]], l2: float = L2) -> np.ndarray:
    return np.stack([grad_f(t, xy, l2) for t, xy in zip(thetas, data, strict=True)])


def thetas_np(sim: Simulation) -> np.ndarray:
    """``[N, d]`` float64 thetas in client order (one cohort)."""
    return sim.state.thetas[0].detach().double().numpy().copy()


def mlp(input_shape: tuple[int, ...], num_outputs: int) -> torch.nn.Module:
    """One hidden layer of 32 ReLU units (``model = tests._baselines_problems:mlp``): a body and a
    head for ``algorithm = partial`` on tabular data."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(int(np.prod(input_shape)), 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, num_outputs),
    )


def mlp_bn(input_shape: tuple[int, ...], num_outputs: int) -> torch.nn.Module:
    """:func:`mlp` with a BatchNorm1d after its hidden layer (``model = tests._baselines_problems:mlp_bn``):
    each client's statistics kept as its own."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(int(np.prod(input_shape)), 32),
        torch.nn.BatchNorm1d(32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, num_outputs),
    )


def restored_beside(
    build: Callable[[], Simulation], before: int, after: int
) -> tuple[Simulation, Simulation]:
    """``(whole, resumed)``: a run of ``before + after`` rounds, and one restored from its checkpoint
    shard after ``before`` rounds and stepped ``after`` more beside it (both from ``build``)."""
    from sheaf_fmtl.metrics.flops import SampleCounter
    from sheaf_fmtl.runtime.run.checkpoints.shard import restore, snapshot

    whole = build()
    for _ in range(before):
        whole.step()
    shard = snapshot(whole, SampleCounter(whole.ctx.fed))
    resumed = build()
    restore(resumed, SampleCounter(resumed.ctx.fed), shard)
    for _ in range(after):
        whole.step()
        resumed.step()
    return whole, resumed
