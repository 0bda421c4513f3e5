"""Closed-form batched gradients of the linear models against torch.func (vmap + grad)."""

from __future__ import annotations

import pytest
import torch
from torch.func import grad_and_value, vmap

from sheaf_fmtl.federation import build_federation

from ..conftest import make_dataset


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_linear_gradients_equal_autograd(task):
    dataset = make_dataset([4, 4, 4, 4], task=task, n=9)
    fed = build_federation(dataset, "auto", l2=0.03)
    cohort = fed.cohorts[0]
    assert cohort._grad == cohort._linear_grad  # the fast path is the one in use
    thetas = torch.randn(4, cohort.dim, generator=torch.Generator().manual_seed(0))
    batch = cohort.sample(5, torch.Generator().manual_seed(1))
    batch[2][3] = 0.0  # a client with an empty batch has f_i = 0 and no gradient
    g, f = cohort.gradients(thetas, batch)
    g_ref, f_ref = vmap(grad_and_value(cohort._loss))(thetas, *batch[:3])
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(f, f_ref, rtol=1e-5, atol=1e-6)
    assert float(f[3]) == 0.0 and float(g[3].abs().max()) == 0.0
    torch.testing.assert_close(
        cohort._linear_forward(thetas, dataset_x := batch[0]), vmap(cohort._forward)(thetas, dataset_x)
    )
