"""The fused cohort CNN step (grouped convolutions, hand-written backward) against a plain per-client
torch reference: each client's own ``nn.Module``, ``F.cross_entropy`` / squared loss, autograd and
``torch.optim.SGD``, in float64."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from sheaf_fmtl.bench.ops import count_aten_ops
from sheaf_fmtl.bench.settings import PAPER
from sheaf_fmtl.bench.synthetic import make_dataset
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.models import build_model
from sheaf_fmtl.models.fused import FusedCNN


def _reference(
    module: nn.Module,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    l2: float,
    task: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One client: ``f = sum_b mask_b loss_b / sum_b mask_b + l2/2 ||theta||^2`` (0 without a sample)
    and its autograd gradient, through the client's own module."""
    theta = theta.detach().clone().requires_grad_()
    params, pos = {}, 0
    for name, p in module.named_parameters():
        params[name] = theta[pos : pos + p.numel()].view(p.shape)
        pos += p.numel()
    out = functional_call(module, params, (x,))
    per = F.cross_entropy(out, y, reduction="none") if task == "classification" else (out[:, 0] - y) ** 2
    count = mask.sum()
    if count == 0:
        return torch.zeros_like(theta), theta.new_zeros(())
    f = (per * mask).sum() / count + 0.5 * l2 * (theta * theta).sum()
    (g,) = torch.autograd.grad(f, theta)
    return g, f.detach()


def _problem(name: str, shape: tuple[int, ...], clients: int, batch: int, task: str = "classification"):
    torch.manual_seed(0)
    module = build_model(name, shape, 10 if task == "classification" else 1).double()
    dim = sum(p.numel() for p in module.parameters())
    thetas = torch.randn(clients, dim, dtype=torch.float64) * 0.1
    x = torch.randn(clients, batch, *shape, dtype=torch.float64)
    y = (
        torch.randint(0, 10, (clients, batch))
        if task == "classification"
        else torch.randn(clients, batch).double()
    )
    mask = torch.ones(clients, batch, dtype=torch.float64)
    mask[0, batch // 2 :] = 0  # a client with a short last batch
    if clients > 2:
        mask[2] = 0  # and one without any sample: zero gradient, f = 0
    return module, thetas, x, y, mask


@pytest.mark.parametrize(
    "name,shape",
    [("cnn", (1, 28, 28)), ("cnn-small", (3, 16, 16)), ("cnn-medium", (1, 12, 12)), ("cnn-large", (28, 28))],
)
def test_fused_gradients_equal_per_client_autograd(name, shape):
    module, thetas, x, y, mask = _problem(name, shape, clients=4, batch=6)
    fused = FusedCNN(module, "classification")
    g, f = fused.loss_and_grad(thetas, x, y, mask, l2=0.01)
    for c in range(len(thetas)):
        want_g, want_f = _reference(module, thetas[c], x[c], y[c], mask[c], 0.01, "classification")
        torch.testing.assert_close(g[c], want_g, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(f[c], want_f, rtol=1e-10, atol=1e-12)


def test_fused_active_rows_and_squared_loss():
    """Rows of some clients only (``rows``): the others get a zero gradient and ``f = 0``; squared loss."""
    module, thetas, x, y, mask = _problem("cnn-small", (1, 12, 12), clients=5, batch=4, task="regression")
    rows = torch.tensor([1, 3, 4])
    fused = FusedCNN(module, "regression")
    g, f = fused.loss_and_grad(thetas, x[rows], y[rows], mask[rows], l2=0.1, rows=rows)
    for c in range(len(thetas)):
        if c in rows.tolist():
            want_g, want_f = _reference(module, thetas[c], x[c], y[c], mask[c], 0.1, "regression")
        else:
            want_g, want_f = torch.zeros_like(thetas[c]), thetas.new_zeros(())
        torch.testing.assert_close(g[c], want_g, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(f[c], want_f, rtol=1e-10, atol=1e-12)


def test_sgd_steps_of_a_cohort_equal_per_client_torch_sgd():
    """Three local epochs of a federation's cohort (epoch batches, some clients running out of data,
    one-op SGD step) against each client's own module and ``torch.optim.SGD`` on the same rows."""
    s = dataclasses.replace(PAPER, name="fused-sgd", clients=4, samples=40)
    fed = build_federation(make_dataset(s), "cnn", l2=1e-3, device="cpu")
    cohort = fed.cohorts[0]
    assert cohort.cnn_kernel == "fused"
    cohort.train.x, cohort.test.x = cohort.train.x.double(), cohort.test.x.double()
    thetas = cohort.init_thetas(0, common=False).double()
    module = copy.deepcopy(cohort.module).double()
    models = [copy.deepcopy(module) for _ in range(cohort.size)]
    for m, t in zip(models, thetas, strict=True):
        torch.nn.utils.vector_to_parameters(t, m.parameters())
    optims = [torch.optim.SGD(m.parameters(), lr=0.05) for m in models]
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        plan = cohort.epoch(8, gen)
        for step in range(plan.steps):
            batch = cohort.epoch_batch(plan, step, 8)
            assert batch is not None
            g, _ = cohort.gradients(thetas, batch)
            thetas = torch.add(thetas, g, alpha=-0.05)
            active = range(cohort.size) if batch.active is None else batch.active.tolist()
            for k, c in enumerate(active):
                optims[c].zero_grad()
                out = models[c](batch.x[k])
                per = F.cross_entropy(out, batch.y[k], reduction="none")
                theta = torch.nn.utils.parameters_to_vector(models[c].parameters())
                loss = (per * batch.mask[k]).sum() / batch.mask[k].sum() + 0.5e-3 * (theta * theta).sum()
                loss.backward()
                optims[c].step()
    want = torch.stack([torch.nn.utils.parameters_to_vector(m.parameters()) for m in models]).detach()
    torch.testing.assert_close(thetas, want, rtol=1e-9, atol=1e-11)


def test_fused_and_im2col_agree_in_float32():
    """The two CNN kernels of a cohort on the same float32 batch (default numbers within float tolerance)."""
    s = dataclasses.replace(PAPER, name="fused-f32", clients=6, samples=60)
    cohort = build_federation(make_dataset(s), "cnn", l2=1e-4, device="cpu").cohorts[0]
    thetas = cohort.init_thetas(0, common=False)
    batch = cohort.sample(16, torch.Generator().manual_seed(0))
    cohort.cnn_kernel = "fused"
    g1, f1 = cohort.gradients(thetas, batch)
    cohort.cnn_kernel = "im2col"
    g2, f2 = cohort.gradients(thetas, batch)
    torch.testing.assert_close(g1, g2, rtol=1e-4, atol=1e-5 * float(g2.abs().max()))
    torch.testing.assert_close(f1, f2, rtol=1e-5, atol=1e-6)


def test_a_fused_gradient_dispatches_few_aten_ops():
    """The op-count target: one cohort gradient of the paper's ``cnn`` in at most
    32 aten ops, whatever the number of clients (the per-group im2col path took hundreds)."""
    counts = []
    for clients in (2, 6):
        module, thetas, x, y, mask = _problem("cnn", (1, 28, 28), clients=clients, batch=4)
        fused = FusedCNN(module, "classification")
        fused.loss_and_grad(thetas, x, y, mask, l2=0.01)  # builds its cached indices and weights
        counts.append(count_aten_ops(lambda: fused.loss_and_grad(thetas, x, y, mask, l2=0.01))["dispatched"])  # noqa: B023
    assert counts[0] == counts[1] <= 32, counts


def test_models_it_cannot_take_fall_back_to_im2col():
    with pytest.raises(ValueError, match="max pools and BatchNorm after a convolution"):
        FusedCNN(nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(1, 2, 3), nn.Flatten()), "classification")


def test_batchnorm_it_cannot_take_falls_back_and_its_statistics_are_required():
    from sheaf_fmtl.models.batchnorm import client_norms

    def per_client(module: nn.Module) -> nn.Module:
        client_norms(module)  # BatchNorm as the cohort holds it: statistics per client
        return module

    before = per_client(nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 2, 3), nn.Flatten()))
    with pytest.raises(ValueError, match="BatchNorm after a convolution"):
        FusedCNN(before, "classification")
    after = per_client(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten()))
    fused, x = FusedCNN(after, "classification"), torch.randn(2, 3, 1, 5, 5)
    thetas, y = torch.randn(2, fused.dim), torch.randint(0, 18, (2, 3))
    with pytest.raises(ValueError, match="pass the clients' statistics"):
        fused.loss_and_grad(thetas, x, y, torch.ones(2, 3), 0.0)
