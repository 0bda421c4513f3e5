"""Evaluation and closed-form gradients a block of clients at a time (``EVAL_ELEMENTS``) give what
one call over every client gives, and what a client-by-client computation gives."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import build_simulation

from ..conftest import make_dataset

BLOCKS = "sheaf_fmtl.federation.evaluation.EVAL_ELEMENTS"


def _scores(cohort, thetas):
    return cohort.train_loss(thetas), cohort.train_loss(thetas, full=True), cohort.test_metric(thetas)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_blocked_evaluation_and_gradients_equal_one_block(monkeypatch, task) -> None:
    cohort = build_federation(make_dataset([4] * 7, task=task, n=10), "auto", l2=0.02).cohorts[0]
    thetas = torch.randn(7, cohort.dim, generator=torch.Generator().manual_seed(0))
    batch = cohort.sample(6, torch.Generator().manual_seed(1))
    whole, (g, f) = _scores(cohort, thetas), cohort.gradients(thetas, batch)
    monkeypatch.setattr(BLOCKS, 1)  # one client a block
    assert cohort.eval_block(6, extra=cohort.dim) == 1
    for got, want in zip(_scores(cohort, thetas), whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    g1, f1 = cohort.gradients(thetas, batch)
    torch.testing.assert_close(g1, g, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(f1, f, rtol=1e-6, atol=1e-7)
    for c in range(7):  # each client alone
        g_c, f_c = cohort.gradients(thetas[c : c + 1], tuple(t[c : c + 1] for t in batch[:3]))
        torch.testing.assert_close(g_c[0], g[c], rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(f_c[0], f[c], rtol=1e-6, atol=1e-7)
        n = int(cohort.n_test[c])
        out = cohort._predict(thetas[c : c + 1], cohort.x_test[c : c + 1, :n])[0]
        y = cohort.y_test[c, :n]
        hits = (out.argmax(-1) == y).float() if task == "classification" else (out[:, 0] - y) ** 2
        want = hits.mean()
        torch.testing.assert_close(whole[2][c], want)


def test_blocked_evaluation_keeps_each_clients_batchnorm_statistics(monkeypatch) -> None:
    dataset = make_dataset([5] * 6, n=8)
    cohort = build_federation(dataset, "tests._baselines_problems:mlp_bn").cohorts[0]
    assert cohort.norms is not None
    gen = torch.Generator().manual_seed(2)
    for name, value in cohort.norms.stats.items():  # every client's own statistics, all different
        if value.is_floating_point():
            cohort.norms.stats[name] = torch.rand(value.shape, generator=gen) + 0.5
    thetas = cohort.init_thetas(0)
    whole = _scores(cohort, thetas)
    monkeypatch.setattr(BLOCKS, 5)  # one client a block (8 samples of 5 features exceed 5)
    for got, want in zip(_scores(cohort, thetas), whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    module = cohort.module.eval()
    for c in range(6):  # client c alone, in plain PyTorch with its statistics loaded
        params = cohort.unflatten(thetas[c])
        buffers = {name: value[c] for name, value in cohort.norms.stats.items()}
        n = int(cohort.n_test[c])
        out = torch.func.functional_call(module, {**params, **buffers}, (cohort.x_test[c, :n],))
        want = (out.argmax(-1) == cohort.y_test[c, :n]).float().mean()
        torch.testing.assert_close(whole[2][c], want)


def test_a_lazy_batch_gives_the_gradients_of_the_gathered_one(monkeypatch) -> None:
    full = make_dataset([4] * 6, n=10)
    sizes = [10, 3, 7, 10, 1, 5]  # clients run out of samples at different steps: active subsets
    clients = tuple(
        dataclasses.replace(c, x_train=c.x_train[:k], y_train=c.y_train[:k])
        for c, k in zip(full.clients, sizes, strict=True)
    )
    cohort = build_federation(dataclasses.replace(full, clients=clients), "auto", l2=0.01).cohorts[0]
    assert cohort.lazy_inputs
    thetas = torch.randn(6, cohort.dim, generator=torch.Generator().manual_seed(3))
    plan = cohort.epoch(4, torch.Generator().manual_seed(4))
    pairs = [(cohort.sample(4, torch.Generator().manual_seed(5), lazy), lazy) for lazy in (False, True)]
    pairs += [
        (cohort.epoch_batch(plan, s, 4, lazy), lazy) for s in range(plan.steps) for lazy in (False, True)
    ]
    monkeypatch.setattr(BLOCKS, 50)  # two clients a block
    active = []
    for (eager, _), (lazy, _) in zip(pairs[::2], pairs[1::2], strict=True):
        assert eager.source is None and lazy.source is cohort.train and lazy.x.dtype == torch.long
        active.append(lazy.active is not None)
        assert torch.equal(lazy.y, eager.y) and torch.equal(lazy.mask, eager.mask)
        g, f = cohort.gradients(thetas, eager)
        g_lazy, f_lazy = cohort.gradients(thetas, lazy)
        torch.testing.assert_close(g_lazy, g, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(f_lazy, f, rtol=1e-6, atol=1e-7)
    assert any(active)  # some step had only some clients


def test_a_run_reads_lazy_batches_where_its_gradients_can() -> None:
    keys = {"dataset": "synthetic", "clients": 4, "rounds": 1, "algorithm": "local"}
    linear = build_simulation(RunConfig(**keys))
    linear.step()
    assert all(b is not None and b.source is not None for b in linear.ctx.last_batches)
    net = build_simulation(RunConfig(**keys, model="tests._baselines_problems:mlp"))
    net.step()
    assert all(b is not None and b.source is None for b in net.ctx.last_batches)


def test_a_user_metric_is_scored_a_block_of_clients_at_a_time(monkeypatch) -> None:
    cohort = build_federation(make_dataset([4] * 5, n=10), "auto").cohorts[0]
    cohort.use_objective(None, lambda out, y: float((out.argmax(-1) == y).float().sum() + out.mean()))
    thetas = torch.randn(5, cohort.dim, generator=torch.Generator().manual_seed(6))
    whole = cohort.test_metric(thetas)
    monkeypatch.setattr(BLOCKS, 1)  # one client a block
    torch.testing.assert_close(cohort.test_metric(thetas), whole)
    for c in range(5):  # each client's whole test set, alone
        n = int(cohort.n_test[c])
        out = cohort._predict(thetas[c : c + 1], cohort.x_test[c : c + 1, :n])[0]
        want = float((out.argmax(-1) == cohort.y_test[c, :n]).float().sum() + out.mean())
        assert float(whole[c]) == pytest.approx(want, rel=1e-6)
