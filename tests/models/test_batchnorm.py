"""BatchNorm kept per client (FedBN): the stacked cohort's parameters, running statistics and
eval-mode outputs equal a per-client plain PyTorch loop (each client its own ``nn.Module`` in
``train()`` on the same batches, then ``eval()``); the statistics are each client's own (not in
``theta_i``), and they travel with the final state, ``load`` and the exports."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import sheaf_fmtl
from sheaf_fmtl.export import export
from sheaf_fmtl.federation.cohort import Cohort
from sheaf_fmtl.federation.ragged import Ragged
from sheaf_fmtl.federation.stacked import Batch
from sheaf_fmtl.models import build_model
from sheaf_fmtl.models.batchnorm import ClientBatchNorm
from sheaf_fmtl.models.user import check_module

L2, LR = 0.01, 0.1


def _net(momentum: float | None, kind: str = "vmap") -> nn.Module:
    """A BatchNorm1d net (the ``vmap`` path) or a BatchNorm2d-only CNN (the fused kernel)."""
    if kind == "fused":
        return nn.Sequential(
            nn.Conv2d(1, 3, 3),
            nn.BatchNorm2d(3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(3, 4, 1),
            nn.BatchNorm2d(4, momentum=momentum),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(4 * 2 * 2, 2),
        )
    return nn.Sequential(
        nn.Conv2d(1, 3, 3),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, 8),
        nn.BatchNorm1d(8, momentum=momentum),
        nn.Linear(8, 2),
    )


def _cohort(ref: nn.Module, x: torch.Tensor, y: torch.Tensor, n: torch.Tensor) -> Cohort:
    clients = np.arange(len(n))
    data = Ragged.from_padded(x, y, n)
    cohort = Cohort(0, clients, "m", check_module(copy.deepcopy(ref), "m"), "classification", L2, data, data)
    cohort.init_thetas(0)  # a run's start: the statistics afresh
    return cohort


def _oracle_step(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """One SGD step of a plain module in train mode on its own real samples."""
    m.train()
    loss = nn.functional.cross_entropy(m(x), y) + 0.5 * L2 * sum((p * p).sum() for p in m.parameters())
    m.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= LR * p.grad


@pytest.mark.parametrize("kind", ["vmap", "fused"])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_stacked_batchnorm_equals_a_per_client_pytorch_loop(momentum: float | None, kind: str) -> None:
    torch.manual_seed(0)
    ref, sizes = _net(momentum, kind), [5, 7, 4]
    n, n_max = torch.tensor(sizes), max(sizes)
    x, y = torch.randn(3, n_max, 1, 6, 6), torch.randint(0, 2, (3, n_max))
    for c, k in enumerate(sizes):
        x[c, k:] = 0  # padding, as the federation pads smaller clients
    cohort = _cohort(ref, x, y, n)
    assert cohort.norms is not None and cohort.dim == sum(p.numel() for p in ref.parameters())
    assert (cohort._fused is not None) == (kind == "fused")
    thetas = torch.nn.utils.parameters_to_vector(ref.parameters()).expand(3, -1).clone()
    oracles = [copy.deepcopy(ref) for _ in sizes]
    for step in range(4):  # batches of 4 positions: on odd steps padding for the smaller clients
        pad = step % 2 == 1
        idx = torch.stack(  # three real samples and a padded position (or four real ones)
            [
                torch.cat(
                    [
                        torch.randperm(k)[: 3 if pad and k < n_max else 4],
                        torch.tensor([n_max - 1] * (pad and k < n_max), dtype=torch.long),
                    ]
                )
                for k in sizes
            ]
        )
        xb = torch.stack([x[c, idx[c]] for c in range(3)])
        yb = torch.stack([y[c, idx[c]] for c in range(3)])
        mask = (idx < n[:, None]).float()
        g, _ = cohort.gradients(thetas, Batch(xb, yb, mask))
        thetas = thetas - LR * g
        for c, m in enumerate(oracles):
            _oracle_step(m, xb[c][mask[c] > 0], yb[c][mask[c] > 0])
    outputs = cohort._predict(thetas, x)
    for c, m in enumerate(oracles):
        torch.testing.assert_close(
            thetas[c], nn.utils.parameters_to_vector(m.parameters()), atol=1e-5, rtol=0
        )
        buffers = dict(m.named_buffers())
        for name, value in cohort.norms.stats.items():  # running variances of order 2: float32's rtol
            torch.testing.assert_close(value[c], buffers[name], atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            torch.testing.assert_close(outputs[c], m.eval()(x[c]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["vmap", "fused"])
def test_a_client_left_out_of_a_step_keeps_its_statistics(kind: str) -> None:
    torch.manual_seed(1)
    ref = _net(0.1, kind)
    n = torch.tensor([4, 4])
    x, y = torch.randn(2, 4, 1, 6, 6), torch.randint(0, 2, (2, 4))
    cohort = _cohort(ref, x, y, n)
    assert cohort.norms is not None
    thetas = torch.nn.utils.parameters_to_vector(ref.parameters()).expand(2, -1).clone()
    before = {k: v.clone() for k, v in cohort.norms.stats.items()}
    g, _ = cohort.gradients(thetas, Batch(x[1:], y[1:], torch.ones(1, 4), torch.tensor([1])))
    assert torch.equal(g[0], torch.zeros_like(g[0])) and g[1].abs().sum() > 0
    for k, v in cohort.norms.stats.items():
        assert torch.equal(v[0], before[k][0])
        assert not torch.equal(v[1], before[k][1])


def test_a_client_that_sits_a_round_out_keeps_its_statistics_as_its_model() -> None:
    """``drop_prob``: the clients the fault plan sits out of a round keep their parameters and
    their BatchNorm statistics; the others' statistics move."""
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.runtime.engine.simulate import build_simulation

    config = RunConfig(
        dataset="synthetic",
        clients=6,
        model="tests._baselines_problems:mlp_bn",
        algorithm="dfedu",
        drop_prob=0.5,
        batch_size=8,
        local_epochs=1,
    )
    sim = build_simulation(config)
    cohort = sim.ctx.fed.cohorts[0]
    assert cohort.norms is not None
    before = {k: v.clone() for k, v in cohort.norms.stats.items()}
    sim.step()
    out = sim.transport.faults.sitting_out()
    assert out is not None and 0 < int(out.sum()) < 6
    for k, v in cohort.norms.stats.items():
        if k.endswith("num_batches_tracked"):
            continue
        for row, client in enumerate(cohort.clients):
            assert torch.equal(v[row], before[k][row]) == bool(out[client]), (k, client)


def test_cnn_bn_has_batchnorm_and_its_statistics_are_not_parameters() -> None:
    plain, norm = build_model("cnn", (1, 28, 28), 10), build_model("cnn-bn", (1, 28, 28), 10)
    count = sum(p.numel() for p in norm.parameters())
    assert count == sum(p.numel() for p in plain.parameters()) + 2 * (32 + 64)  # affine weights only
    assert sum(isinstance(m, nn.BatchNorm2d) for m in norm.modules()) == 2


@pytest.mark.slow  # (a run, a load and an export: make test-slow)
def test_a_run_keeps_each_clients_statistics_and_load_gives_them_back(tmp_path) -> None:
    spec = "tests._baselines_problems:mlp_bn"
    keys = {"dataset": "synthetic", "clients": 4, "rounds": 2, "batch_size": 8, "algorithm": "fedavg"}
    result = sheaf_fmtl.run(model=spec, out=tmp_path / "run", **keys)
    final = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    stats = final["batchnorm"]
    assert len(stats) == len(result.thetas) and all(s["2.num_batches_tracked"] > 0 for s in stats)
    assert not torch.equal(stats[0]["2.running_mean"], stats[1]["2.running_mean"])  # never averaged
    trained = sheaf_fmtl.load(tmp_path / "run", model=spec)
    for i, s in enumerate(stats):
        buffers = dict(trained.model(i).named_buffers())
        assert all(torch.equal(buffers[k], v) for k, v in s.items())
        assert not any(isinstance(m, ClientBatchNorm) for m in trained.model(i).modules())
    scored = trained.evaluate()
    assert scored["mean"] == pytest.approx(result.summary["final"], abs=1e-6)
    export(tmp_path / "run", tmp_path / "exp", model=spec)
    x = torch.randn(6, *trained.preprocessing["clients"][1]["feature_shape"])
    state = torch.load(tmp_path / "exp" / "client-00001.pt", weights_only=True)
    assert all(torch.equal(state[k], v) for k, v in stats[1].items())  # the state_dict holds them
    program = torch.export.load(tmp_path / "exp" / "client-00001.pt2").module()
    with torch.no_grad():
        torch.testing.assert_close(program(x), trained.client(1)(x))
