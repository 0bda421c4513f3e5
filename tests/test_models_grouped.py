"""Grouped cohort forward/gradients against per-client modules and autograd."""

from __future__ import annotations

import pytest
import torch
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
    for c in range(clients):
        want = functional_call(module, {n: p[c] for n, p in params.items()}, (x[c],))
        torch.testing.assert_close(got[c], want, rtol=1e-4, atol=1e-5)


def test_linear_models_use_vmap_path():
    assert not grouped.supports(build_model("logistic", (5,), 3))
