"""The local epochs as one step of static shapes (``compile``, ``algorithms/training/epoch.py``) against
the loop of changing shapes (``compile = false``): the same iterates, batch losses, optimizer
state and random streams, on clients of unequal sizes whose passes do not divide evenly; compiled,
one graph without a break."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.training.epoch import StaticEpoch, resolve_compile, static_step
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.sheaf.graph import make_graph

# torch.compile's own import of torch.jit warns of its deprecation (not this package's use)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

SIZES = [23, 7, 16, 5, 11, 30]  # batch 4: 6, 2, 4, 2, 3, 8 steps a pass; 23, 7, 11 leave a short batch
RUNS = {  # algorithm, extra keys
    "local": ("local", {}),
    "dfedu": ("dfedu", {"lam": 0.5}),
    "dpsgd": ("dpsgd", {}),
    "fedavg": ("fedavg", {}),
    "learned": ("sheaf-fmtl", {"maps": "learned", "lam": 0.5, "eta": 0.05, "gamma": 0.5}),
    "fixed": ("sheaf-fmtl", {"maps": "fixed", "lam": 0.5, "gamma": 0.5}),
    "redrawn": ("sheaf-fmtl", {"maps": "redrawn", "lam": 0.5, "gamma": 0.5}),
}


def _dataset(shape: tuple[int, ...], seed: int = 0) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    clients = []
    for n in SIZES:
        clients.append(
            ClientSplit(
                rng.normal(size=(n, *shape)).astype(np.float32),
                rng.integers(0, 3, n),
                rng.normal(size=(5, *shape)).astype(np.float32),
                rng.integers(0, 3, 5),
            )
        )
    return FederatedDataset("unequal", "classification", 3, tuple(clients))


def _sim(name: str, model: str, compile_: bool, **keys: object) -> Simulation:
    algorithm, extra = RUNS[name]
    base = {"batch_size": 4, "local_epochs": 1, "alpha": 0.05, "l2": 1e-3, "stability_check": False}
    cfg = RunConfig(algorithm=algorithm, compile=compile_, **{**base, **extra, **keys})  # type: ignore[arg-type]
    shape = (1, 12, 12) if model == "cnn" else (4,)
    fed = build_federation(_dataset(shape), model, l2=cfg.l2)
    graph = make_graph("erdos-renyi", fed.num_clients, p=0.6, seed=1)
    return build_simulation(cfg, fed=fed, graph=graph)


def _pair(name: str, model: str, compiled: bool, **keys: object) -> tuple[Simulation, Simulation]:
    """The loop's simulation and the static step's (compiled or not) of one config."""
    loop, static = _sim(name, model, False, **keys), _sim(name, model, True, **keys)
    assert static.compiled and not loop.compiled and loop.ctx.static_epoch is None
    static.ctx.static_epoch = StaticEpoch(compiled=compiled)
    return loop, static


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def _assert_same(loop: Simulation, static: Simulation, rounds: int, tol: float = 1e-5) -> None:
    for _ in range(rounds):
        loop.step()
        static.step()
    for a, b in zip(static.state.thetas, loop.state.thetas, strict=True):
        assert _rel(a, b) < tol, _rel(a, b)
    assert static.state.batch_loss is not None and loop.state.batch_loss is not None
    assert _rel(static.state.batch_loss, loop.state.batch_loss) < tol
    for field in ("opt_rows", "opt_scalars", "opt_t"):
        for a, b in zip(getattr(static.state, field), getattr(loop.state, field), strict=True):
            assert _rel(a, b) < tol, field
    assert static.state.opt_calls == loop.state.opt_calls
    for a, b in zip(getattr(static.state, "maps", []), getattr(loop.state, "maps", []), strict=True):
        assert _rel(a, b) < tol
    # the epoch cursor stands where the loop's does (equal iterates after several rounds: the
    # same batches were drawn each round)
    assert static.ctx._cursor == loop.ctx._cursor


@pytest.mark.parametrize("name", list(RUNS))
def test_the_static_step_gives_the_loops_iterates_on_uneven_passes(name: str) -> None:
    loop, static = _pair(name, "logistic", compiled=False)
    assert loop.ctx.local_steps() == 8  # the largest client; others run out, some mid-batch
    _assert_same(loop, static, rounds=3)


@pytest.mark.parametrize(
    "keys",
    [
        {"optimizer": "momentum", "lr_schedule": "cosine"},
        {"optimizer": "adam", "lr_schedule": "cosine"},
        {"optimizer": "NAdam", "weight_decay": 0.01, "grad_clip": 0.5, "lr_scheduler": "CosineAnnealingLR"},
    ],
    ids=["momentum", "adam", "nadam-clip-scheduler"],
)
def test_the_static_step_keeps_a_client_without_samples_and_its_optimizer_state(keys: dict) -> None:
    loop, static = _pair("local", "logistic", compiled=False, **keys)
    _assert_same(loop, static, rounds=3)


@pytest.mark.parametrize("name", ["dfedu", "redrawn"])
def test_the_static_step_gives_the_loops_iterates_on_cnn_clients(name: str) -> None:
    loop, static = _pair(name, "cnn", compiled=False)
    _assert_same(loop, static, rounds=2)


def test_two_epochs_a_round_walk_two_passes() -> None:
    loop, static = _pair("dfedu", "logistic", compiled=False, local_epochs=2)
    _assert_same(loop, static, rounds=2)


def test_compile_resolves_per_device_and_says_where_it_cannot_run() -> None:
    fed = build_federation(_dataset((4,)), "logistic", l2=1e-3)
    assert resolve_compile(RunConfig(), fed) == (False, None)  # null on the CPU: the loop
    assert resolve_compile(RunConfig(compile=False), fed) == (False, None)
    assert resolve_compile(RunConfig(algorithm="dfedu", compile=True), fed) == (True, None)
    for keys, why in [
        ({"algorithm": "sheaf-fmtl", "maps": "proxy"}, "'proxy'"),
        ({"algorithm": "ditto"}, "'ditto'"),
        ({"algorithm": "dfedu", "local_epochs": 0}, "local_epochs = 0"),
    ]:
        on, note = resolve_compile(RunConfig(compile=True, **keys), fed)  # type: ignore[arg-type]
        assert not on and note is not None and why in note and "\n" not in note
    with pytest.raises(ConfigError, match="compile"):
        RunConfig(compile="yes")  # type: ignore[arg-type]


def test_a_run_records_what_ran() -> None:
    sim = _sim("redrawn", "logistic", True, maps="proxy")
    assert not sim.compiled and sim.compile_note is not None and "proxy" in sim.compile_note
    assert sim.config.compile  # the config stays as given (saved, grouped, resumed as given)
    assert _sim("dfedu", "logistic", True).compile_note is None


# ------------------------------------------------------------------------------------- compiled


def _graph_breaks(sim: Simulation) -> int:
    """Graph breaks of one cohort's static step on its first step's inputs."""
    (cohort,) = sim.ctx.fed.cohorts
    runner = StaticEpoch(compiled=False)
    (plan,) = sim.ctx.epoch_plans()
    idx, masks, active = runner._inputs(0, cohort, plan, sim.config.batch_size)
    theta = sim.state.thetas[0]
    args = (theta, cohort.train.x, cohort.train.y, idx[-1], masks[-1])
    explained = torch._dynamo.explain(static_step(cohort, sim.config))(*args, torch.tensor(0.05))
    return int(explained.graph_break_count)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["logistic", "cnn"])
def test_the_compiled_step_has_no_graph_break_and_the_loops_numbers(model: str) -> None:
    loop, static = _pair("dfedu", model, compiled=True)
    assert _graph_breaks(_sim("dfedu", model, True)) == 0
    _assert_same(loop, static, rounds=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["local", "redrawn", "learned"])
def test_the_compiled_step_gives_the_loops_numbers_for_each_algorithm(name: str) -> None:
    keys = {"optimizer": "adam"} if name == "local" else {}
    loop, static = _pair(name, "logistic", compiled=True, **keys)
    _assert_same(loop, static, rounds=2)


def test_the_static_step_walks_several_cohorts_with_their_own_passes() -> None:
    # feature maps: clients that see different features, one cohort per input size
    cfg = RunConfig(
        dataset="synthetic-clusters", clients=6, maps="features", lam=0.3, batch_size=8, edge_weights="graph"
    )
    loop, static = build_simulation(cfg.replace(compile=False)), build_simulation(cfg.replace(compile=True))
    assert len(static.ctx.fed.cohorts) > 1 and static.compiled
    static.ctx.static_epoch = StaticEpoch(compiled=False)
    _assert_same(loop, static, rounds=2)
