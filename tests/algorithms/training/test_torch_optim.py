"""PyTorch's optimizers and schedulers over the stacked clients: each client's row follows its own
``torch.optim`` instance over its own parameter tensor (the oracle), also when clients step unevenly
(no batch at some steps, first steps at different times), with weight decay, a scheduler and
per-client gradient clipping; optimizers that are not elementwise, and keys that do not fit, are
refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from sheaf_fmtl.algorithms.protocol.algorithm import State
from sheaf_fmtl.algorithms.training.optim import learning_rate, local_step
from sheaf_fmtl.config import ConfigError, RunConfig, load_config
from sheaf_fmtl.federation import Batch
from tests.algorithms.training.test_optim import local_run_and_its_first_client

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

CLIENTS, DIM, ROUNDS, STEPS = 4, 5, 4, 3
ALPHA = 0.05


class SignMomentum(torch.optim.Optimizer):
    """A user's elementwise optimizer (``module:Class``) that keeps its step count as a Python int."""

    def __init__(self, params: object, lr: float = 0.01, beta: float = 0.9) -> None:
        super().__init__(params, {"lr": lr, "beta": beta})  # type: ignore[arg-type]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"], st["buf"] = 0, torch.zeros_like(p)
                st["step"] += 1
                st["buf"].mul_(group["beta"]).add_(p.grad)
                p.add_(st["buf"].sign(), alpha=-group["lr"] / st["step"] ** 0.5)


OPT, SCHED = torch.optim, torch.optim.lr_scheduler
# name -> (config keys, the oracle's optimizer for one client's tensor, its scheduler or None, grad_clip)
CASES: dict[str, tuple[dict, Callable, Callable | None, float]] = {
    "sgd-momentum": (
        {"optimizer": "SGD", "optimizer_args": {"momentum": 0.9, "dampening": 0.1}},
        lambda p: OPT.SGD([p], lr=ALPHA, momentum=0.9, dampening=0.1),
        None,
        0.0,
    ),
    "adam-amsgrad": (
        {"optimizer": "Adam", "optimizer_args": {"amsgrad": True, "betas": [0.8, 0.99]}},
        lambda p: OPT.Adam([p], lr=ALPHA, amsgrad=True, betas=(0.8, 0.99)),
        None,
        0.0,
    ),
    "adamw": (
        {"optimizer": "AdamW", "weight_decay": 0.1},
        lambda p: OPT.AdamW([p], lr=ALPHA, weight_decay=0.1),
        None,
        0.0,
    ),
    "rmsprop": (
        {"optimizer": "RMSprop", "optimizer_args": {"momentum": 0.5, "centered": True}, "weight_decay": 0.01},
        lambda p: OPT.RMSprop([p], lr=ALPHA, momentum=0.5, centered=True, weight_decay=0.01),
        None,
        0.0,
    ),
    "nadam-cosine": (  # NAdam keeps a second number per client (mu_product); T_max from rounds
        {"optimizer": "NAdam", "lr_scheduler": "CosineAnnealingLR"},
        lambda p: OPT.NAdam([p], lr=ALPHA),
        lambda o: SCHED.CosineAnnealingLR(o, T_max=ROUNDS),
        0.0,
    ),
    "adamw-steplr-clip": (
        {
            "optimizer": "AdamW",
            "lr_scheduler": "StepLR",
            "lr_scheduler_args": {"step_size": 2, "gamma": 0.5},
            "grad_clip": 1.0,
        },
        lambda p: OPT.AdamW([p], lr=ALPHA),
        lambda o: SCHED.StepLR(o, step_size=2, gamma=0.5),
        1.0,
    ),
    "user-class": (
        {"optimizer": f"{__name__}:SignMomentum", "optimizer_args": {"beta": 0.5}},
        lambda p: SignMomentum([p], lr=ALPHA, beta=0.5),
        None,
        0.0,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.filterwarnings("ignore:Detected call of .lr_scheduler:UserWarning")  # (a client not yet stepped)
def test_every_row_follows_its_own_torch_optimizer(name):
    keys, make, schedule, clip = CASES[name]
    config = RunConfig(algorithm="local", alpha=ALPHA, rounds=ROUNDS, **keys)
    gen = torch.Generator().manual_seed(3)
    theta0 = torch.randn(CLIENTS, DIM, generator=gen, dtype=torch.float64)
    ctx = SimpleNamespace(config=config, local_steps=lambda: STEPS, last_batches=[])
    state = State(thetas=[theta0.clone()])
    params = [theta0[c].clone() for c in range(CLIENTS)]
    opts = [make(p) for p in params]
    scheds = [schedule(o) for o in opts] if schedule else []
    for r in range(ROUNDS):
        for _ in range(STEPS):
            g = 3 * torch.randn(CLIENTS, DIM, generator=gen, dtype=torch.float64)
            active = torch.rand(CLIENTS, generator=gen) < 0.6  # the others have no batch this step
            active[-1] = r >= 2  # the last client's first step comes later than the others'
            empty = torch.zeros(int(active.sum()), 1)
            ctx.last_batches = [Batch(empty, empty, empty, torch.nonzero(active).flatten())]
            state.thetas = local_step(ctx, state, state.thetas, [g], ALPHA)  # type: ignore[arg-type]
            for c in range(CLIENTS):
                if active[c]:
                    params[c].grad = g[c].clone()
                    if clip:
                        torch.nn.utils.clip_grad_norm_([params[c]], clip)
                    opts[c].step()
        for sch in scheds:
            sch.step()
    torch.testing.assert_close(state.thetas[0], torch.stack(params), rtol=1e-10, atol=1e-12)
    assert len(set(state.opt_t[0].tolist())) > 1  # the clients stepped unevenly: several groups ran


def test_the_scheduler_steps_once_a_round_and_its_length_defaults_to_rounds():
    config = RunConfig(algorithm="local", alpha=0.2, rounds=6, lr_scheduler="CosineAnnealingLR")
    opt = torch.optim.SGD([torch.zeros(1)], lr=0.2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    want = []
    for _ in range(6):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert [learning_rate(config, r) for r in range(6)] == want
    closed = RunConfig(algorithm="local", alpha=0.2, rounds=6, lr_schedule="cosine")  # the earlier spelling
    assert [learning_rate(closed, r) for r in range(6)] == pytest.approx(want, rel=1e-12, abs=1e-15)
    step = RunConfig(algorithm="local", lr_scheduler="StepLR", lr_scheduler_args={"step_size": 2}, alpha=1.0)
    assert [learning_rate(step, r) for r in range(5)] == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01])


def test_overrides_reach_the_optimizer_and_scheduler_arguments():
    config = load_config(
        overrides=[
            "algorithm=local",
            "optimizer=SGD",
            "optimizer_args.momentum=0.9",
            "optimizer_args.nesterov=true",
        ]
        + ["lr_scheduler=ExponentialLR", "lr_scheduler_args.gamma=0.5"]
    )
    assert config.optimizer_args == {"momentum": 0.9, "nesterov": True}
    assert config.lr_scheduler_args == {"gamma": 0.5}


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"optimizer": "LBFGS"}, "'optimizer' = LBFGS is refused: .*closure.*elementwise.*optimizer=AdamW"),
        ({"optimizer": "Adafactor"}, "'optimizer' = Adafactor is refused: its update of one row depends"),
        ({"optimizer": "rmsprop"}, "did you mean optimizer='RMSprop'"),
        ({"optimizer": "AdamW", "optimizer_args": {"lr": 0.1}}, "'optimizer_args' sets 'lr'.*alpha"),
        ({"optimizer": "AdamW", "optimizer_args": {"weight_decay": 0.1}, "weight_decay": 0.1}, "both set"),
        ({"optimizer": "Adam", "optimizer_args": {"bogus": 1}}, "'optimizer' = Adam is refused: .*bogus"),
        ({"lr_scheduler_args": {"gamma": 0.5}}, "'lr_scheduler_args' is set but lr_scheduler is empty"),
        (
            {"lr_scheduler": "ReduceLROnPlateau"},
            "ReduceLROnPlateau is refused: it steps on a validation metric",
        ),
        ({"lr_scheduler": "OneCycleLR"}, "OneCycleLR cannot be built.*max_lr.*lr_scheduler_args.NAME=VALUE"),
        (
            {"lr_scheduler": "StepLR", "lr_scheduler_args": {"step_size": 2}, "lr_schedule": "cosine"},
            "both set",
        ),
        ({"algorithm": "ditto", "grad_clip": 1.0}, "'grad_clip' = 1.0 does not apply to algorithm=ditto"),
        ({"algorithm": "dfedu", "optimizer": "AdamW", "local_epochs": 0}, "needs local_epochs > 0"),
        ({"grad_clip": -1.0}, "grad_clip >= 0"),
    ],
)
def test_refusals_name_the_key_the_value_and_the_fix(keys, match):
    with pytest.raises(ConfigError, match=match) as e:
        RunConfig(**{"algorithm": "local", **keys})
    assert "\n" not in str(e.value)


def test_a_run_trains_one_client_as_torch_adamw_with_a_scheduler_and_clipping_does():
    """End to end on the user-object path: client 0's model after a run of ``local`` with AdamW,
    CosineAnnealingLR and grad_clip equals PyTorch's own loop on the same full-batch loss from the
    same initial model (read through a callback at round 0)."""
    theta, model, x, y = local_run_and_its_first_client(
        local_epochs=0,
        local_steps=3,
        optimizer="AdamW",
        alpha=0.05,
        lr_scheduler="CosineAnnealingLR",
        grad_clip=0.1,
    )
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    for _ in range(4):
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
        sched.step()
    want = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    torch.testing.assert_close(theta, want, rtol=1e-5, atol=1e-5)  # float32 gradients


def test_a_checkpoint_of_the_earlier_optimizer_layout_is_read_when_empty_and_refused_otherwise():
    theta = torch.zeros(2, 3)
    state = State(thetas=[theta])
    state.restore({"thetas": [theta], "opt_m": [], "opt_v": [], "opt_t": [], "opt_calls": 0}, "cpu")
    assert state.opt_rows == [] and state.opt_t == []
    with pytest.raises(ValueError, match="earlier layout"):
        state.restore({"thetas": [theta], "opt_m": [theta], "opt_v": [], "opt_t": [theta[:, 0]]}, "cpu")
