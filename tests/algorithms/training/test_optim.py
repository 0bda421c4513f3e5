"""The local optimizers and schedules: each client's row follows ``torch.optim`` (the independent
oracle) step for step, a client without a batch keeps its state, the defaults are plain SGD with
the paper's numbers, and the algorithms whose paper fixes plain SGD refuse the keys in one line."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.algorithms.protocol.algorithm import State
from sheaf_fmtl.algorithms.training.optim import learning_rate, local_step
from sheaf_fmtl.algorithms.training.steps import sgd_step
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.federation import Batch

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

STEPS_PER_ROUND = 3
OPT_FIELDS = ("thetas", "opt_rows", "opt_scalars", "opt_t")


def _torch_optimizer(config: RunConfig, param: torch.nn.Parameter) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        betas = (config.adam_beta1, config.adam_beta2)
        return torch.optim.Adam([param], lr=config.alpha, betas=betas, eps=config.adam_eps)
    return torch.optim.SGD(
        [param], lr=config.alpha, momentum=config.momentum if config.optimizer == "momentum" else 0
    )


def _schedule(config: RunConfig, opt: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    if config.lr_schedule == "step":
        return torch.optim.lr_scheduler.StepLR(
            opt, step_size=config.lr_step_every, gamma=config.lr_step_gamma
        )
    if config.lr_schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.rounds)
    return torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0)


@pytest.mark.parametrize(
    "keys",
    [
        {"optimizer": "momentum", "momentum": 0.8},
        {"optimizer": "adam"},
        {
            "optimizer": "adam",
            "adam_beta1": 0.5,
            "adam_beta2": 0.9,
            "adam_eps": 1e-3,
            "lr_schedule": "cosine",
        },
        {"optimizer": "momentum", "lr_schedule": "step", "lr_step_every": 2, "lr_step_gamma": 0.5},
        {"optimizer": "sgd", "lr_schedule": "cosine"},
    ],
)
def test_every_row_follows_torch_optim(keys):
    config = RunConfig(algorithm="local", alpha=0.1, rounds=5, **keys)
    gen = torch.Generator().manual_seed(0)
    clients, d, rounds = 3, 4, 5
    theta0 = torch.randn(clients, d, generator=gen, dtype=torch.float64)
    ctx = SimpleNamespace(config=config, local_steps=lambda: STEPS_PER_ROUND, last_batches=[])
    state = State(thetas=[theta0.clone()])
    params = [torch.nn.Parameter(theta0[c].clone()) for c in range(clients)]
    opts = [_torch_optimizer(config, p) for p in params]
    scheds = [_schedule(config, o) for o in opts]
    for _ in range(rounds):
        for _ in range(STEPS_PER_ROUND):
            g = torch.randn(clients, d, generator=gen, dtype=torch.float64)
            active = torch.rand(clients, generator=gen) < 0.7  # the others have no batch this step
            empty = torch.zeros(clients, 1)  # the batch's rows are those of the active clients
            ctx.last_batches = [Batch(empty, empty, empty, torch.nonzero(active).flatten())]
            state.thetas = local_step(ctx, state, state.thetas, [g], config.alpha)  # type: ignore[arg-type]
            for c in range(clients):
                if active[c]:
                    params[c].grad = g[c].clone()
                    opts[c].step()
        for s in scheds:
            s.step()
    want = torch.stack([p.detach() for p in params])
    torch.testing.assert_close(state.thetas[0], want, rtol=1e-12, atol=1e-12)
    assert state.opt_calls == rounds * STEPS_PER_ROUND


def test_the_defaults_are_plain_sgd_exactly():
    config = RunConfig(algorithm="local")
    ctx = SimpleNamespace(config=config, local_steps=lambda: 1, last_batches=[])
    thetas, grads = [torch.randn(3, 5), torch.randn(2, 7)], [torch.randn(3, 5), torch.randn(2, 7)]
    state = State(thetas=thetas)
    got = local_step(ctx, state, thetas, grads, 0.05)  # type: ignore[arg-type]
    assert all(torch.equal(a, b) for a, b in zip(got, sgd_step(thetas, grads, 0.05), strict=True))
    assert state.opt_rows == [] and state.opt_calls == 0  # no state kept, nothing checkpointed


def test_schedules_by_hand():
    step = RunConfig(alpha=0.2, lr_schedule="step", lr_step_every=3, lr_step_gamma=0.5, algorithm="local")
    assert [learning_rate(step, r) for r in range(7)] == [0.2, 0.2, 0.2, 0.1, 0.1, 0.1, 0.05]
    cosine = RunConfig(alpha=0.2, lr_schedule="cosine", rounds=4, algorithm="local")
    assert [learning_rate(cosine, r) for r in range(5)] == pytest.approx(
        [0.2, 0.1 * (1 + math.cos(math.pi / 4)), 0.1, 0.1 * (1 + math.cos(3 * math.pi / 4)), 0.0]
    )
    assert learning_rate(RunConfig(alpha=0.2), 50) == 0.2


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"algorithm": "ditto", "optimizer": "adam"}, "'optimizer' = adam does not apply to algorithm=ditto"),
        ({"algorithm": "pfedme", "lr_schedule": "cosine"}, "'lr_schedule' = cosine does not apply.*Moreau"),
        ({"algorithm": "perfedavg", "optimizer": "momentum"}, "MAML"),
        ({"algorithm": "sheaf-fmtl", "optimizer": "adam", "local_epochs": 0}, "needs local_epochs > 0"),
        ({"algorithm": "dfedu", "lr_schedule": "step", "local_epochs": 0}, "needs local_epochs > 0"),
        ({"algorithm": "dpsgd-ft", "optimizer": "adam", "local_epochs": 0}, "needs local_epochs > 0"),
        ({"algorithm": "partial", "optimizer": "momentum"}, "one part of the model at a time"),
        ({"momentum": 0.5}, "'momentum' is set but optimizer = sgd"),
        (
            {"optimizer": "momentum", "adam_eps": 1e-6, "algorithm": "local"},
            "'adam_eps' is set but optimizer = momentum",
        ),
        ({"lr_step_gamma": 0.5, "algorithm": "local"}, "'lr_step_gamma' is set but lr_schedule = constant"),
        ({"optimizer": "rmsprop"}, "allowed: sgd, momentum, adam"),
        ({"optimizer": "momentum", "momentum": 1.0, "algorithm": "local"}, "0 <= momentum < 1"),
    ],
)
def test_refusals_name_the_key(keys, match):
    with pytest.raises(ConfigError, match=match) as e:
        RunConfig(**keys)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "keys",
    [
        {"algorithm": "local", "local_epochs": 0, "local_steps": 2},
        {"algorithm": "sheaf-fmtl", "local_epochs": 1},
        {"algorithm": "sheaf-fmtl", "local_epochs": 1, "maps": "redrawn", "gamma": 0.3},
        {"algorithm": "dfedu", "local_epochs": 1},
        {"algorithm": "dpsgd", "local_epochs": 1},
        {"algorithm": "fedavg", "local_epochs": 0, "local_steps": 2},
    ],
)
def test_each_allowed_algorithm_trains_with_adam(keys):
    base = {"dataset": "synthetic", "clients": 4, "rounds": 3, "batch_size": 8, "stability_check": False}
    sgd = sheaf_fmtl.run(**base, **keys)
    adam = sheaf_fmtl.run(**base, **keys, optimizer="adam", alpha=0.01)
    assert adam.summary["status"] == "ok" and all(torch.isfinite(t).all() for t in adam.thetas)
    assert not all(torch.equal(a, b) for a, b in zip(sgd.thetas, adam.thetas, strict=True))
    again = sheaf_fmtl.run(**base, **keys, optimizer="adam", alpha=0.01)
    assert all(torch.equal(a, b) for a, b in zip(again.thetas, adam.thetas, strict=True))  # deterministic


def local_run_and_its_first_client(
    **keys: object,
) -> tuple[torch.Tensor, torch.nn.Linear, torch.Tensor, torch.Tensor]:
    """A 4-round run of ``local`` (full batches, no l2, ``keys`` on top) on two clients of a
    3-feature, 2-class problem: client 0's final model, a ``Linear`` holding its initial model
    (read through a callback at round 0), and its training data."""
    gen = torch.Generator().manual_seed(1)
    data = []
    for _ in range(2):
        x, xt = torch.randn(20, 3, generator=gen), torch.randn(6, 3, generator=gen)
        data.append(
            (x, torch.randint(0, 2, (20,), generator=gen), xt, torch.randint(0, 2, (6,), generator=gen))
        )
    initial: dict[int, torch.Tensor] = {}

    class Initial:
        def on_round_end(self, round, metrics, view):  # noqa: ANN001, ANN201
            if round == 0:
                initial[0] = view.theta(0)

    base = {"algorithm": "local", "batch_size": 0, "l2": 0.0, "standardize": False, "rounds": 4}
    result = sheaf_fmtl.run(
        data=data, model=lambda: torch.nn.Linear(3, 2), callbacks=[Initial()], **{**base, **keys}
    )
    model = torch.nn.Linear(3, 2)
    torch.nn.utils.vector_to_parameters(initial[0], model.parameters())
    return result.thetas[0], model, data[0][0], data[0][1]


def test_a_run_trains_one_client_as_torch_optim_adam_does():
    """End to end on the user-object path: client 0's model after a run of ``local`` with Adam and
    a step schedule equals ``torch.optim.Adam`` + ``StepLR`` on the same full-batch loss from the
    same initial model (read through a callback at round 0)."""
    theta, model, x, y = local_run_and_its_first_client(
        local_epochs=0,
        local_steps=3,
        optimizer="adam",
        alpha=0.05,
        lr_schedule="step",
        lr_step_every=2,
        lr_step_gamma=0.5,
    )
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(4):
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        sched.step()
    want = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    torch.testing.assert_close(theta, want, rtol=1e-5, atol=1e-5)  # float32 gradients


@pytest.mark.parametrize("algorithm", ["local", "fedavg"])
def test_a_client_sitting_a_round_out_keeps_its_optimizer_state(algorithm):
    from sheaf_fmtl.runtime.engine.simulate import build_simulation

    keys = {"dataset": "synthetic", "clients": 6, "batch_size": 8, "drop_prob": 0.5, "seed": 1}
    sim = build_simulation(RunConfig(algorithm=algorithm, optimizer="adam", alpha=0.01, **keys))
    sim.step()  # round 1: the optimizer state exists from here on
    seen = 0
    for _ in range(4):
        before = [[t.clone() for t in getattr(sim.state, f)] for f in OPT_FIELDS]
        sim.step()
        out = sim.transport.faults.sitting_out()
        if out is None:
            continue
        rows = torch.as_tensor(out[sim.ctx.fed.cohorts[0].clients])
        after = [getattr(sim.state, f) for f in OPT_FIELDS]
        for old, new in zip(before, after, strict=True):
            assert torch.equal(new[0][rows], old[0][rows])  # held back: model and optimizer
            assert not torch.equal(new[0][~rows], old[0][~rows])  # the others stepped
        seen += int(rows.sum())
    assert seen > 0
