"""``maps = proxy``: only the proxies cross an edge (payload sizes and values), the joint local
gradients against per-client autograd of the deep-mutual-learning losses, a round against a hand
computation of dFedU on the proxies with lost messages and a client sitting out, bits and FLOPs by
hand counts, the proxy's default, stopped-and-resumed runs, and the refused combinations."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sheaf_fmtl.algorithms.maps.proxy import ProxySheaf, ProxyState
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import Batch
from sheaf_fmtl.messages import EdgeTensor
from sheaf_fmtl.metrics.flops import per_sample_flops
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.runtime.run import loop
from sheaf_fmtl.runtime.run.launching.resume import resume
from tests.runtime.run.checkpoints.test_checkpoint import _assert_same_run, _stopped
from tests.runtime.test_faults import GRAPH, FixedPlan, half_edge, install

SHAPE = (1, 10, 10)
CLASSES = 3


def images(clients: int = 4, n: int = 12, seed: int = 0) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    splits = []
    for _ in range(clients):
        x, xt = rng.normal(size=(n, *SHAPE)), rng.normal(size=(5, *SHAPE))
        y, yt = rng.integers(0, CLASSES, n), rng.integers(0, CLASSES, 5)
        splits.append(ClientSplit(x.astype(np.float32), y, xt.astype(np.float32), yt))
    return FederatedDataset("images", "classification", CLASSES, tuple(splits))


BASE = {
    "maps": "proxy",
    "model": "cnn-small,cnn-medium",
    "lam": 0.5,
    "alpha": 0.1,
    "batch_size": 4,
    "local_epochs": 1,
    "l2": 0.01,
    "distill": 0.7,
    "edge_weights": "graph",  # the proxies' coupling itself (learned weights: test_edge_weights.py)
}


def sim_of(**changes: object) -> Simulation:
    return build_simulation(RunConfig(**{**BASE, **changes}), dataset=images(), graph=GRAPH)


def proxies(sim: Simulation) -> dict[int, torch.Tensor]:
    state, fed = sim.state, sim.ctx.fed
    assert isinstance(state, ProxyState)
    return {i: state.proxies[fed.cohort_of[i]][fed.position[i]].clone() for i in range(fed.num_clients)}


def test_only_the_proxies_cross_an_edge() -> None:
    sim = sim_of()
    state, alg = sim.state, sim.algorithm
    assert isinstance(state, ProxyState) and isinstance(alg, ProxySheaf)
    small = sum(p.numel() for p in alg.proxy_cohorts[0].module.parameters())
    assert alg.proxy_cohorts[0].model_name == "cnn-small"  # the run's smaller model is the proxy
    payload = alg.send(state, 0, sim.ctx)
    assert list(payload) == ["msg"]
    msg = payload["msg"]
    assert isinstance(msg, EdgeTensor)
    assert msg.data.numel() == GRAPH.num_half_edges * small  # the whole proxy per half-edge
    phi = proxies(sim)
    layout = state.coupling.layout  # type: ignore[union-attr]
    for b, block in zip(layout.buckets, layout.bucket_messages(msg.data), strict=True):
        for h, row in zip(b.half_edges.tolist(), block, strict=True):
            src = int(GRAPH.src[h])
            torch.testing.assert_close(row.sort().values, phi[src].sort().values)  # phi_i, reordered
    state.thetas = [torch.full_like(t, float("nan")) for t in state.thetas]  # the private models
    again = alg.send(state, 0, sim.ctx)["msg"]
    assert isinstance(again, EdgeTensor)
    torch.testing.assert_close(again.data, msg.data)  # nothing of them is in the payload


def _dml_oracle(
    private: nn.Module, proxy: nn.Module, theta: torch.Tensor, phi: torch.Tensor, batch: Batch, cfg: RunConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Client by client with ``nn.Module`` copies: ``grad_theta [CE(a) + distill KL(sg p_b || p_a)]`` and
    ``grad_phi [CE(b) + distill KL(sg p_a || p_b)]`` on the masked batch, plus ``l2/2 ||.||^2``."""
    gt, gp = [], []
    for c in range(len(theta)):
        m_a, m_b = copy.deepcopy(private), copy.deepcopy(proxy)
        nn.utils.vector_to_parameters(theta[c].clone(), m_a.parameters())
        nn.utils.vector_to_parameters(phi[c].clone(), m_b.parameters())
        keep = batch.mask[c] > 0
        x, y = batch.x[c][keep], batch.y[c][keep]
        a, b = m_a(x), m_b(x)
        la, lb = F.log_softmax(a, -1), F.log_softmax(b, -1)
        kl_a = F.kl_div(la, lb.detach().exp(), reduction="none").sum(-1).mean()
        kl_b = F.kl_div(lb, la.detach().exp(), reduction="none").sum(-1).mean()
        reg_a = 0.5 * cfg.l2 * sum((p * p).sum() for p in m_a.parameters())
        reg_b = 0.5 * cfg.l2 * sum((p * p).sum() for p in m_b.parameters())
        loss_a = F.cross_entropy(a, y) + cfg.distill * kl_a + reg_a
        loss_b = F.cross_entropy(b, y) + cfg.distill * kl_b + reg_b
        ga = torch.autograd.grad(loss_a, list(m_a.parameters()))
        gb = torch.autograd.grad(loss_b, list(m_b.parameters()))
        gt.append(torch.cat([g.reshape(-1) for g in ga]))
        gp.append(torch.cat([g.reshape(-1) for g in gb]))
    return torch.stack(gt), torch.stack(gp)


@pytest.mark.parametrize("active", [False, True])
def test_joint_gradients_equal_per_client_autograd_of_the_mutual_losses(active: bool) -> None:
    sim = sim_of(init="per-client")
    state, alg, fed = sim.state, sim.algorithm, sim.ctx.fed
    assert isinstance(state, ProxyState) and isinstance(alg, ProxySheaf)
    k = 1  # cnn-medium clients with a cnn-small proxy
    cohort = fed.cohorts[k]
    gen = torch.Generator().manual_seed(3)
    c = cohort.size
    x = torch.randn(c, 5, *SHAPE, generator=gen)
    y = torch.randint(0, CLASSES, (c, 5), generator=gen)
    mask = torch.ones(c, 5)
    mask[0, 3:] = 0  # padding
    theta, phi = state.thetas[k], state.proxies[k]
    if active:  # only client row 1 takes this step
        idx = torch.tensor([1])
        batch = Batch(x[idx], y[idx], mask[idx], idx)
    else:
        batch = Batch(x, y, mask)
    gt, gp, f = alg._cohort_gradients(k, cohort, theta, phi, batch)
    rows = [1] if active else list(range(c))
    sub = Batch(x[rows], y[rows], mask[rows])
    want_t, want_p = _dml_oracle(
        cohort.module, alg.proxy_cohorts[k].module, theta[rows], phi[rows], sub, sim.config
    )
    torch.testing.assert_close(gt[rows], want_t, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gp[rows], want_p, rtol=1e-4, atol=1e-6)
    if active:
        assert gt[0].abs().max() == 0 and gp[0].abs().max() == 0 and f[0] == 0
    # the reported f_i is the sum of both losses (the KL values are those of the oracle)
    assert torch.isfinite(f).all() and (f[rows] > 0).all()


def test_a_round_is_local_training_then_dfedu_on_the_proxies_over_the_messages_heard() -> None:
    """Round 1: edge {0, 1} lost both ways and 2 -> 3 lost; round 2: client 2 sits out. The run
    without coupling (lam = 0, the same batches) gives the locally trained models of each round."""
    coupled, alone = sim_of(), sim_of(lam=0.0)
    install(
        coupled,
        FixedPlan({2: [2]}, {1: [half_edge(GRAPH, 0, 1), half_edge(GRAPH, 1, 0), half_edge(GRAPH, 2, 3)]}),
    )
    every = {(int(a), int(b)) for a, b in zip(GRAPH.src, GRAPH.dst, strict=True)}
    heard = {1: every - {(0, 1), (1, 0), (3, 2)}, 2: {(i, j) for i, j in every if 2 not in (i, j)}}
    cfg = coupled.config
    for round_ in (1, 2):
        before_priv = {i: coupled.theta(i).clone() for i in range(4)}
        before_phi = proxies(coupled)
        # the uncoupled run, put at the coupled run's state, trains locally on the same batches
        alone.state.thetas = [t.clone() for t in coupled.state.thetas]
        alone.state.proxies = [p.clone() for p in coupled.state.proxies]  # type: ignore[attr-defined]
        alone.ctx.load_random_state(coupled.ctx.random_state())
        alone.step()
        trained = proxies(alone)
        coupled.step()
        got = proxies(coupled)
        for i in range(4):
            if round_ == 2 and i == 2:  # sat out: both models as they were
                torch.testing.assert_close(got[i], before_phi[i])
                torch.testing.assert_close(coupled.theta(i), before_priv[i])
                continue
            pull = sum(
                (trained[i] - trained[j] for (a, j) in heard[round_] if a == i), torch.zeros_like(trained[i])
            )
            torch.testing.assert_close(got[i], trained[i] - cfg.alpha * cfg.lam * pull, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(
                coupled.theta(i), alone.theta(i), rtol=1e-5, atol=1e-6
            )  # never coupled


def test_bits_and_flops_are_counted_by_hand(tmp_path) -> None:
    cfg = RunConfig(**{**BASE, "rounds": 2, "eval_every": 2})
    out = loop.execute(cfg, None, sim=build_simulation(cfg, dataset=images(), graph=GRAPH))
    s = out.summary
    d = sum(p.numel() for p in build_small().parameters())
    assert s["transmitted_bits"] == 2 * GRAPH.num_half_edges * d * 32
    assert s["flops_sheaf"] == 2 * 2 * GRAPH.num_half_edges * d  # residuals and their sum, one step a round
    small, medium = build_small(), build_medium()
    per = {
        "cnn-small": 2 * per_sample_flops(small, SHAPE, "classification"),
        "cnn-medium": per_sample_flops(medium, SHAPE, "classification")
        + per_sample_flops(small, SHAPE, "classification"),
    }
    samples = 2 * 12  # one pass over each client's 12 samples a round
    assert s["flops_local"] == samples * 2 * (per["cnn-small"] + per["cnn-medium"])


def build_small() -> nn.Module:
    from sheaf_fmtl.models import build_model

    return build_model("cnn-small", SHAPE, CLASSES)


def build_medium() -> nn.Module:
    from sheaf_fmtl.models import build_model

    return build_model("cnn-medium", SHAPE, CLASSES)


def test_stopped_and_resumed_proxy_run_equals_the_uninterrupted_one(tmp_path, monkeypatch) -> None:
    path = tmp_path / "images.npz"
    data = images(4)
    arrays: dict[str, np.ndarray] = {"num_clients": np.int64(4)}
    for i, c in enumerate(data.clients):
        arrays[f"x_{i}"], arrays[f"y_{i}"] = (
            np.concatenate([c.x_train, c.x_test]),
            np.concatenate([c.y_train, c.y_test]),
        )
    np.savez(path, **arrays)
    config = RunConfig(
        **{
            **BASE,
            "dataset": f"file:{path}",
            "rounds": 6,
            "eval_every": 2,
            "drop_prob": 0.2,
            "link_drop_prob": 0.2,
        }
    )
    loop.execute(config, tmp_path / "full")
    stopped = _stopped(config, tmp_path / "part", at=3)
    assert stopped["status"] == "interrupted"
    outcome = resume(tmp_path / "part")
    assert outcome.summary["resumed_from_round"] == 3
    _assert_same_run(tmp_path / "full", tmp_path / "part")
    assert outcome.summary["dropped_messages"] > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"proxy_model": "resnet-9"}, "config key 'proxy_model' = 'resnet-9' is not a built-in model"),
        (
            {"model": "cnn-small", "proxy_model": "logistic", "dataset": "synthetic-clusters"},
            "one architecture",
        ),
        ({"proxy_model": "cnn-small", "dataset": "synthetic-clusters"}, "proxy_model=cnn-small does not fit"),
    ],
)
def test_proxies_that_do_not_fit_are_refused_in_one_line(changes: dict, message: str) -> None:
    cfg = RunConfig(**{**BASE, **changes})
    with pytest.raises(ConfigError, match=message) as err:
        if "dataset" in changes:
            build_simulation(cfg.replace(model="logistic", clients=6))
        else:
            build_simulation(cfg, dataset=images(), graph=GRAPH)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"topology": "hybrid-fl"}, "config key 'maps' = proxy builds its own maps"),
        ({"distill": -1.0}, "distill >= 0"),
        ({"estimates": True}, "estimates' = true needs maps=redrawn"),
    ],
)
def test_bad_proxy_keys_are_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        RunConfig(**{**BASE, **changes})
    assert "\n" not in str(err.value)


def test_proxy_gamma_couples_the_round_s_selected_proxy_coordinates_only() -> None:
    coupled, alone = sim_of(proxy_gamma=0.1), sim_of(proxy_gamma=0.1, lam=0.0)
    alone.ctx.load_random_state(coupled.ctx.random_state())
    alone.step()
    coupled.step()
    d = sum(p.numel() for p in build_small().parameters())
    d_e = int(np.floor(0.1 * d))
    assert coupled.transport.bits == GRAPH.num_half_edges * d_e * 32
    moved = {i: (proxies(coupled)[i] - proxies(alone)[i]).abs() > 0 for i in range(4)}
    for i in range(4):  # at most its degree's d_e selected coordinates, and some of them
        degree = int((GRAPH.src == i).sum())
        assert 0 < int(moved[i].sum()) <= degree * d_e
