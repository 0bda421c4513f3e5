"""Grouped cohort forward/gradients against per-client modules and autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from sheaf_fmtl.models import build_model, grouped


@pytest.mark.parametrize("name", ["cnn", "cnn-small", "cnn-medium", "cnn-large"])
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_grouped_forward_equals_each_client_module(name, shape):
    torch.manual_seed(0)
    module = build_model(name, shape, 10)
    assert grouped.supports(module)
    clients, batch = 3, 4
    params = {n: torch.randn(clients, *p.shape) * 0.1 for n, p in module.named_parameters()}
    x = torch.randn(clients, batch, *shape)
    got = grouped.forward(module, params, x)
    exact = module.double()  # float64 oracle: float32 sums in another order differ by ~1e-6 of the scale
    for c in range(clients):
        want = functional_call(exact, {n: p[c].double() for n, p in params.items()}, (x[c].double(),))
        scale = float(want.abs().max())
        torch.testing.assert_close(got[c].double(), want, rtol=0, atol=1e-5 * scale)


def test_linear_models_use_vmap_path():
    assert not grouped.supports(build_model("logistic", (5,), 3))


def test_conv_without_bias_and_rectangular_kernel_match_autograd_in_float64():
    """The hand-written im2col backward against autograd of ``F.conv2d`` (per client, float64)."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(2, 3, (2, 3), padding=(1, 0), bias=False), nn.ReLU(), nn.Flatten())
    clients, batch = 2, 3
    w = (torch.randn(clients, 3, 2, 2, 3, dtype=torch.float64) * 0.5).requires_grad_()
    x = torch.randn(clients, batch, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(clients, batch, 3 * 6 * 4, dtype=torch.float64)
    got_w, got_x = torch.autograd.grad((grouped.forward(module, {"0.weight": w}, x) * upstream).sum(), (w, x))
    for c in range(clients):
        wc, xc = w[c].detach().requires_grad_(), x[c].detach().requires_grad_()
        out = torch.relu(torch.nn.functional.conv2d(xc, wc, padding=(1, 0))).flatten(1)
        want_w, want_x = torch.autograd.grad((out * upstream[c]).sum(), (wc, xc))
        torch.testing.assert_close(got_w[c], want_w)
        torch.testing.assert_close(got_x[c], want_x)


def test_strided_convolutions_are_not_supported():
    assert not grouped.supports(nn.Sequential(nn.Conv2d(1, 2, 3, stride=2), nn.Flatten()))
