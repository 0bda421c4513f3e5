"""Partial personalisation (``partial``, DFedAlt's round): which coordinates are personal, the round
against DFedAlt's three steps written out with per-client autograd and numpy mixing (full batch, path
graph), the bits and mixing FLOPs of the body alone, the refusal of a model without a body, and
learning above local training on related clients."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.algorithms.baselines.partial import personal_coordinates
from sheaf_fmtl.config import ConfigError
from tests._baselines_problems import L2, federation, path_graph, regression_dataset, simulation

DATA = regression_dataset(sizes=(6, 8, 10, 9))
TINY = "tests._baselines_problems:tiny_network"  # Flatten, Linear(3, 4), Tanh, Linear(4, 1): d = 16 + 5
FED = federation(DATA, model=TINY)
ALPHA = 0.05


def _deep(input_shape: tuple[int, ...], num_outputs: int) -> torch.nn.Module:
    """Three layers with parameters, the middle one without a bias."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(int(np.prod(input_shape)), 4),
        torch.nn.ReLU(),
        torch.nn.Linear(4, 3, bias=False),
        torch.nn.ReLU(),
        torch.nn.Linear(3, num_outputs),
    )


def test_the_personal_coordinates_are_the_last_layers_parameters() -> None:
    head = personal_coordinates(FED.cohorts[0], 1)
    assert head.tolist() == [False] * 16 + [True] * 5  # the last Linear's weight (4) and bias (1)
    deep = federation(DATA, model="tests.algorithms.baselines.test_baselines_partial:_deep").cohorts[0]
    assert deep.dim == 16 + 12 + 4
    assert personal_coordinates(deep, 1).tolist() == [False] * 28 + [True] * 4
    assert personal_coordinates(deep, 2).tolist() == [False] * 16 + [True] * 16


def test_a_model_without_a_body_is_refused_in_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'personal_layers' = 1 .* only one layer .*1\.weight, 1\.bias"):
        simulation("partial", federation(DATA))  # the linear model: one layer
    with pytest.raises(ConfigError, match=r"'personal_layers' = 2 .* 2 layers .* layer count \(2\)"):
        simulation("partial", FED, personal_layers=2)


def _loss_grad(model: torch.nn.Module, theta: torch.Tensor, x: np.ndarray, y: np.ndarray) -> torch.Tensor:
    """``grad f_i`` by autograd on the module, one client: mean squared error + ``L2/2 ||theta||^2``."""
    theta = theta.detach().double().requires_grad_(True)
    params, start = {}, 0
    for name, p in model.named_parameters():
        params[name] = theta[start : start + p.numel()].view(p.shape)
        start += p.numel()
    out = torch.func.functional_call(model, params, (torch.as_tensor(x, dtype=torch.float64),))
    loss = ((out.squeeze(-1) - torch.as_tensor(y, dtype=torch.float64)) ** 2).mean()
    (g,) = torch.autograd.grad(loss + 0.5 * L2 * (theta * theta).sum(), theta)
    return g


def _reference_round(thetas: torch.Tensor, head: np.ndarray, steps: int) -> torch.Tensor:
    """DFedAlt's round: ``steps`` head steps, ``steps`` body steps, then the body mixed with the
    Metropolis-Hastings weights of the path 0 - 1 - 2 - 3 (degrees 1, 2, 2, 1)."""
    model = copy.deepcopy(FED.cohorts[0].module).double()
    mask = torch.as_tensor(head, dtype=torch.float64)
    out = []
    for theta, c in zip(thetas.double(), DATA.clients, strict=True):
        for part in (mask, 1.0 - mask):
            for _ in range(steps):
                theta = theta - ALPHA * part * _loss_grad(model, theta, c.x_train, c.y_train)
        out.append(theta)
    x = torch.stack(out)
    w = torch.tensor(
        [[2 / 3, 1 / 3, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [0, 1 / 3, 1 / 3, 1 / 3], [0, 0, 1 / 3, 2 / 3]],
        dtype=torch.float64,
    )
    body = torch.as_tensor(~head)
    mixed = x.clone()
    mixed[:, body] = w @ x[:, body]
    return mixed


@pytest.mark.parametrize("steps", [1, 2])
def test_a_round_is_dfedalts_head_steps_body_steps_and_body_mixing(steps: int) -> None:
    sim = simulation("partial", FED, path_graph(4), batch_size=0, local_steps=steps, alpha=ALPHA)
    head = personal_coordinates(FED.cohorts[0], 1)
    expected = sim.state.thetas[0].double()
    for _ in range(2):
        expected = _reference_round(expected, head, steps)
        sim.step()
        torch.testing.assert_close(sim.state.thetas[0].double(), expected, rtol=1e-5, atol=1e-6)


def test_bits_and_mixing_flops_are_the_bodys() -> None:
    """Each client sends its body (16 floats) to each neighbour; the head (5) never leaves it."""
    graph = path_graph(4)
    sim = simulation("partial", FED, graph, batch_size=0)
    for _ in range(3):
        sim.step()
    body, half_edges = 16, graph.num_half_edges
    assert sim.transport.bits == 3 * 32 * body * half_edges
    assert sim.flops([0], 3)["flops_aggregation"] == 3 * 2 * body * (half_edges + 4)


# One cluster of related tasks, every feature seen, an MLP of one hidden layer (a body and a head).
RELATED = {
    "dataset": "synthetic-clusters",
    "data": {"homogeneous": True, "groups": 1},
    "model": "tests._baselines_problems:mlp",
    "rounds": 40,
    "eval_every": 40,
    "alpha": 0.2,
    "seed": 1,
}


def test_partial_personalisation_learns_above_local_training_on_related_clients() -> None:
    local = sheaf_fmtl.run(algorithm="local", **RELATED).summary["final"]
    partial = sheaf_fmtl.run(algorithm="partial", **RELATED).summary["final"]
    assert partial > local + 0.02, (partial, local)
