"""CNN models: parameter counts of the paper's architectures; vmapped cohort gradients."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch.func import functional_call

from sheaf_fmtl.bench.settings import PAPER
from sheaf_fmtl.bench.synthetic import make_dataset
from sheaf_fmtl.federation import build_federation, count_parameters
from sheaf_fmtl.models import MODELS, build_model

MNIST, CIFAR = (1, 28, 28), (3, 32, 32)


@pytest.mark.parametrize(
    ("name", "shape", "exact"),
    [
        ("cnn", MNIST, 34_826),
        ("cnn", CIFAR, 42_442),
        ("cnn-small", MNIST, 23_466),
        ("cnn-small", CIFAR, 32_586),
        ("cnn-medium", MNIST, 123_562),
        ("cnn-medium", CIFAR, 153_562),
        ("cnn-large", MNIST, 212_146),
        ("cnn-large", CIFAR, 297_202),
    ],
)
def test_parameter_counts(name: str, shape: tuple[int, ...], exact: int) -> None:
    assert count_parameters(build_model(name, shape, 10)) == exact


# The heterogeneous-architecture Table's approximate counts, and how close our choices land.
TABLE = [
    ("cnn-small", MNIST, 23e3, 0.05),
    ("cnn-medium", MNIST, 121e3, 0.05),
    ("cnn-large", MNIST, 212e3, 0.05),
    ("cnn-small", CIFAR, 28e3, 0.20),
    ("cnn-medium", CIFAR, 154e3, 0.05),
    ("cnn-large", CIFAR, 297e3, 0.05),
    ("cnn", MNIST, 35e3, 0.05),  # "a CNN with about 35K parameters"
]


@pytest.mark.parametrize(("name", "shape", "approx", "tol"), TABLE)
def test_counts_match_paper_table(name: str, shape: tuple[int, ...], approx: float, tol: float) -> None:
    assert abs(count_parameters(build_model(name, shape, 10)) - approx) <= tol * approx


def test_registered_and_two_dimensional_inputs() -> None:
    assert {"cnn", "cnn-small", "cnn-medium", "cnn-large"} <= set(MODELS)
    m = build_model("cnn-medium", (28, 28), 10)
    assert m(torch.zeros(2, 28, 28)).shape == (2, 10)
    with pytest.raises(ValueError, match="image inputs"):
        build_model("cnn", (784,), 10)


def test_no_batchnorm_or_inplace_in_the_papers_cnns() -> None:
    for name in ("cnn", "cnn-small", "cnn-medium", "cnn-large"):
        for mod in build_model(name, CIFAR, 10).modules():
            assert not isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)
            assert not getattr(mod, "inplace", False)


@pytest.mark.parametrize("name", ["cnn", "cnn-small", "cnn-medium", "cnn-large"])
def test_vmapped_cohort_gradients_equal_per_client_autograd(name: str) -> None:
    """``Cohort.gradients`` (torch.func vmap) against a per-client autograd loop in float64.

    (The float32 per-client loop is the less accurate side: oneDNN's unbatched conv backward
    deviated from float64 by up to 4e-3 relative on some clients; the vmapped path by 1e-7.)"""
    torch.manual_seed(0)
    s = dataclasses.replace(PAPER, name="t", clients=4, samples=40)
    fed = build_federation(make_dataset(s), name, l2=1e-3)
    (cohort,) = fed.cohorts
    thetas = cohort.init_thetas(0)
    batch = cohort.sample(8, torch.Generator().manual_seed(1))
    grads, losses = cohort.gradients(thetas, batch)
    module = copy.deepcopy(cohort.module).double()
    x, y, mask = batch[:3]
    for k in range(cohort.size):
        theta = thetas[k].double().requires_grad_(True)
        keep = mask[k].bool()
        out = functional_call(module, cohort.unflatten(theta), (x[k][keep].double(),))
        loss = torch.nn.functional.cross_entropy(out, y[k][keep]) + 0.5 * 1e-3 * (theta * theta).sum()
        (g,) = torch.autograd.grad(loss, theta)
        assert float(loss.detach()) == pytest.approx(float(losses[k]), rel=1e-5)
        torch.testing.assert_close(grads[k].double(), g, rtol=1e-4, atol=1e-5 * float(g.abs().max()))
