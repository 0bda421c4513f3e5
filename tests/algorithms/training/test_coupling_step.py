"""The coupling's own step after the local epochs (``coupling_step``): the effective step against
hand computations of SGD, heavy-ball SGD and Adam; a round of dFedU and of the redrawn maps against
the local phase plus a dense Laplacian step (networkx's Laplacian: the independent oracle); plain
SGD's numbers unchanged; the cap, the work factor, what summary.json records, the refusals and the
warning for a negligible strength."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.algorithms.training import coupling_step as cs
from sheaf_fmtl.algorithms.training import epoch
from sheaf_fmtl.api import resolve_config
from sheaf_fmtl.config import ConfigError
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from tests.helpers import StopAt

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

PROBLEM = {"dataset": "synthetic-clusters", "data": {"homogeneous": True}, "clients": 8, "seed": 3}
ADAMW = {"optimizer": "AdamW", "alpha": 0.001}


def test_effective_step_is_alpha_for_sgd_and_the_hand_computed_rate_for_momentum_and_adam() -> None:
    gen = torch.Generator().manual_seed(0)
    theta0, g = torch.randn(3, 6, generator=gen), torch.randn(3, 6, generator=gen)
    # plain SGD, 4 steps on the same gradients: moved -alpha * (4 g) along G = 4 g
    alpha = 0.05
    sgd = cs.effective_step(theta0, theta0 - alpha * 4 * g, 4 * g)
    assert torch.allclose(sgd, torch.full((3,), alpha, dtype=torch.float64))
    # heavy-ball SGD on a constant gradient, buffer warm: each step moves alpha g / (1 - beta)
    beta, p = 0.9, torch.nn.Parameter(theta0.clone())
    opt = torch.optim.SGD([p], lr=alpha, momentum=beta)
    for _ in range(400):
        p.grad = g.clone()
        opt.step()
    start = p.detach().clone()
    for _ in range(5):
        p.grad = g.clone()
        opt.step()
    step = cs.effective_step(start, p.detach(), 5 * g)
    assert torch.allclose(step, torch.full((3,), alpha / (1 - beta), dtype=torch.float64), rtol=1e-4)
    # Adam on a constant gradient: every coordinate moves lr sign(g) a step (m/sqrt(v) -> sign), so
    # the fit of the move on G is lr sum|g| / sum g^2 per row
    lr, p = 0.01, torch.nn.Parameter(theta0.clone())
    opt = torch.optim.Adam([p], lr=lr, eps=1e-12)
    for _ in range(3):
        p.grad = g.clone()
        opt.step()
    hand = lr * g.abs().sum(1) / (g * g).sum(1)
    assert torch.allclose(cs.effective_step(theta0, p.detach(), 3 * g), hand.double(), rtol=1e-5)
    # no gradient: no measure (NaN); a move against the gradients: 0, never a negative step
    assert torch.isnan(cs.effective_step(theta0, theta0, torch.zeros_like(g))).all()
    assert (cs.effective_step(theta0, theta0 + g, g) == 0).all()


def test_the_work_factor_is_one_up_to_sixteen_steps_and_their_square_root_beyond() -> None:
    assert cs.work_factor(2) == cs.work_factor(16) == 1.0
    assert cs.work_factor(64) == pytest.approx(2.0)
    assert cs.work_factor(50) == pytest.approx(math.sqrt(50 / 16))


def _one_round(**keys: object) -> tuple[list[torch.Tensor], object]:
    sim = build_simulation(resolve_config(None, **{**PROBLEM, **keys}))
    sim.step()
    return [t.clone() for t in sim.state.thetas], sim


def _laplacian(sim: object) -> torch.Tensor:
    graph = sim.ctx.graph  # type: ignore[attr-defined]
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from(graph.edges.tolist())
    return torch.as_tensor(
        nx.laplacian_matrix(g, nodelist=range(graph.num_nodes)).toarray(), dtype=torch.float64
    )


@pytest.mark.parametrize("optimizer", [{}, {"optimizer": "SGD", "optimizer_args": {"momentum": 0.9}}, ADAMW])
def test_a_dfedu_round_is_the_local_phase_then_a_laplacian_step_at_the_coupling_step(monkeypatch, optimizer):
    """theta = theta_local - c_i lam (L theta_local)_i, c_i: alpha (plain SGD) or what the local phase
    measured (recorded from effective_step as it ran)."""
    seen: list[torch.Tensor] = []
    measure = epoch.effective_step

    def record(*args: torch.Tensor) -> torch.Tensor:
        seen.append(measure(*args))
        return seen[-1]

    monkeypatch.setattr(epoch, "effective_step", record)
    local, _ = _one_round(algorithm="local", **optimizer)
    seen.clear()
    coupled, sim = _one_round(algorithm="dfedu", lam=0.2, **optimizer)
    lam, theta = 0.2, local[0].double()
    c = torch.full((len(theta),), sim.config.alpha, dtype=torch.float64) if not optimizer else seen[0]
    if optimizer:
        assert not torch.allclose(c, torch.full_like(c, sim.config.alpha))  # not the learning rate
    want = theta - (c[:, None] * lam) * (_laplacian(sim) @ theta)
    assert torch.allclose(coupled[0].double(), want, atol=1e-6)


def test_a_redrawn_round_with_a_given_coupling_step_is_the_local_phase_then_that_step():
    """With every coordinate drawn (gamma 1) the redrawn maps' round is dFedU's at c = coupling_step,
    whatever the optimizer's learning rate, and the learned edge weights start at 1."""
    local, _ = _one_round(algorithm="local", **ADAMW)
    coupled, sim = _one_round(
        algorithm="sheaf-fmtl", maps="redrawn", gamma=1.0, lam=0.2, coupling_step=0.04, **ADAMW
    )
    theta = local[0].double()
    want = theta - (0.04 * 0.2) * (_laplacian(sim) @ theta)
    assert torch.allclose(coupled[0].double(), want, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["sheaf-fmtl", "dfedu"])
def test_plain_sgd_couples_at_alpha_as_before(algorithm):
    """The default (coupling_step = null under plain SGD) is bit for bit the step tied to alpha."""
    keys = {**PROBLEM, "algorithm": algorithm, "rounds": 6}
    default = sheaf_fmtl.run(**keys)
    tied = sheaf_fmtl.run(**keys, coupling_step=0.05)
    assert all(torch.equal(a, b) for a, b in zip(default.thetas, tied.thetas, strict=True))
    assert default.summary["coupling_step"] == "alpha = 0.05 (plain SGD)"
    assert default.summary["pull_per_round"] == pytest.approx(0.05 * default.summary["lam"], rel=1e-3)


def test_a_measured_step_is_recorded_and_capped_at_exact_averaging():
    s = sheaf_fmtl.run(**PROBLEM, algorithm="dfedu", rounds=4, **ADAMW).summary
    assert s["coupling_step"].startswith("the local optimizer's effective step")
    assert s["optimizer"] == "AdamW" and s["coupling_step_mean"] > 2 * 0.001
    assert "coupling_step_capped" not in s
    lmax = float(
        np.linalg.eigvalsh(_laplacian(build_simulation(resolve_config(None, **PROBLEM))).numpy())[-1]
    )
    strong = sheaf_fmtl.run(**PROBLEM, algorithm="dfedu", rounds=4, lam=500.0, **ADAMW).summary
    assert strong["coupling_step_capped"] == 4 * PROBLEM["clients"]
    assert strong["pull_per_round"] == pytest.approx(1 / lmax, rel=0.05)  # (lambda_max by Lanczos)


def test_more_than_sixteen_local_steps_pull_harder_by_the_work_factor():
    keys = {**PROBLEM, "algorithm": "dfedu", "rounds": 2, "local_epochs": 1, "batch_size": 1}
    sim = build_simulation(resolve_config(None, **keys))
    steps = sim.ctx.local_steps()
    assert steps > 16
    s = sheaf_fmtl.run(**keys).summary
    assert s["coupling_step_mean"] == pytest.approx(0.05 * math.sqrt(steps / 16), rel=1e-3)
    assert "work factor" in s["coupling_step"]


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"algorithm": "sheaf-fmtl", "maps": "learned", "coupling_step": 0.1}, "Algorithm 1"),
        ({"algorithm": "dfedu", "local_epochs": 0, "coupling_step": 0.1}, "local_epochs > 0"),
        ({"algorithm": "fedavg", "coupling_step": 0.1}, "applies to algorithm=sheaf-fmtl or dfedu"),
        ({"algorithm": "dfedu", "coupling_step": 0.0}, "coupling_step > 0"),
        ({"algorithm": "sheaf-fmtl", "maps": "proxy", "optimizer": "AdamW"}, "maps=proxy"),
    ],
)
def test_refusals_name_the_key(keys, match):
    with pytest.raises(ConfigError, match=match):
        resolve_config(None, **keys)


def test_a_negligible_user_strength_is_warned_once_naming_the_key():
    weak = sheaf_fmtl.run(**PROBLEM, algorithm="sheaf-fmtl", rounds=2, lam=0.01).summary["warnings"]
    assert any("lam pulls each model 33 times less" in w for w in weak)
    fine = sheaf_fmtl.run(**PROBLEM, algorithm="dfedu", rounds=2, lam=0.05).summary["warnings"]
    assert not any("negligible" in w for w in fine)
    tied = sheaf_fmtl.run(**PROBLEM, algorithm="dfedu", rounds=2, coupling_step=0.0001, lam=0.1).summary
    assert any("lam and coupling_step pull" in w for w in tied["warnings"])


def test_functional_maps_take_the_local_optimizer():
    keys = {"dataset": "synthetic", "clients": 4, "rounds": 2, "maps": "functional", "seed": 1}
    sgd = sheaf_fmtl.run(**keys, alpha=0.01)
    adam = sheaf_fmtl.run(**keys, optimizer="Adam", alpha=0.01)
    assert not torch.allclose(sgd.thetas[0], adam.thetas[0])
    assert adam.summary["coupling_step"].startswith("the local optimizer's effective step")


def test_resume_continues_a_measured_coupling_bit_for_bit(tmp_path):
    keys = {**PROBLEM, "algorithm": "sheaf-fmtl", "rounds": 6, "eval_every": 3, **ADAMW}
    whole = sheaf_fmtl.run(**keys)

    sheaf_fmtl.run(**keys, out=tmp_path / "run", callbacks=[StopAt(3)])
    resumed = sheaf_fmtl.run(resume=tmp_path / "run")
    assert resumed.summary["resumed_from_round"] == 3
    assert all(torch.equal(a, b) for a, b in zip(whole.thetas, resumed.thetas, strict=True))
    assert resumed.summary["coupling_step_mean"] == whole.summary["coupling_step_mean"]
