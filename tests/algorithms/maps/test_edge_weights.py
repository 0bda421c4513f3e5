"""Edge weights learned from what neighbours exchange (``edge_weights = relatedness``): one round
against a dense numpy oracle, symmetry (the coupling stays zero-sum), the bits, and the weights
separating related from unrelated neighbours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms.maps import edge_weights
from sheaf_fmtl.algorithms.maps.coordinate_state import CoordinateState
from sheaf_fmtl.algorithms.maps.edge_weights import BETA, EVERY, PROBE_SAMPLES
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.data.synthetic import clusters_groups
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.runtime.run.loop import execute
from tests.algorithms.maps.test_coordinate_maps import GRAPH, HOMOGENEOUS

LEARNED = {**HOMOGENEOUS, "edge_weights": "relatedness", "init": "common"}


def _sim(**changes: object) -> tuple[Simulation, list[list[torch.Tensor]]]:
    """The simulation, and the gradients of each round as the run draws them (recorded)."""
    sim = build_simulation(RunConfig(**{**LEARNED, **changes}), graph=GRAPH)
    ctx, seen = sim.ctx, []

    def recorded(t: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        grads, losses = ctx.gradients_on(t, ctx.next_batches())
        seen.append(grads)
        return grads, losses

    ctx.gradient_source = recorded
    return sim, seen


def _probe_loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray, classes: int) -> float:
    """Mean cross-entropy of a logistic model ``theta = [W (classes x F) flattened, b]``."""
    features = x.reshape(len(x), -1)
    w = theta[: classes * features.shape[1]].reshape(classes, -1)
    logits = features @ w.T + theta[classes * features.shape[1] :]
    top = logits.max(1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(1))
    return float(np.mean(lse - logits[np.arange(len(y)), y]))


def _half_edges(sim: Simulation) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``src``, ``dst`` in the state's half-edge order, and each half-edge's coupled coordinates
    (this round's selection, drawn now and cached for the step)."""
    state = sim.state
    assert isinstance(state, CoordinateState) and state.layout is not None
    layout = state.layout
    coords = sim.algorithm._maps(state)[0]  # type: ignore[attr-defined]
    d = int(layout.node_dims[0])
    local = torch.cat(
        [
            c[0 : len(c)] - b.src_pos_on("cpu")[:, None] * d
            for b, c in zip(layout.buckets, coords, strict=True)
        ]
    )
    src, dst = layout.graph.src[layout.order], layout.graph.dst[layout.order]
    return src, dst, [row.numpy() for row in local]


@pytest.mark.parametrize(("chunk", "elements"), [(4096, 1 << 22), (3, 1 << 22), (4096, 1000)])
def test_one_round_equals_a_dense_numpy_oracle(
    chunk: int, elements: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exchange round (the averages under way): weights from both ends' averages, the step with
    them, and the averages updated from this round's probe losses, by hand in float64; the next
    round keeps the weights. The probes are evaluated in chunks of ``chunk`` rows, or of what an
    evaluation budget of ``elements`` input elements holds."""
    from sheaf_fmtl.federation import evaluation

    monkeypatch.setattr(edge_weights, "PROBE_CHUNK", chunk)
    monkeypatch.setattr(evaluation, "EVAL_ELEMENTS", elements)
    sim, grads = _sim()
    for _ in range(2 * EVERY):
        sim.step()
    state = sim.state
    assert isinstance(state, CoordinateState) and state.relatedness is not None
    src, dst, sel = _half_edges(sim)
    theta = {i: sim.theta(i).double().numpy().copy() for i in range(4)}
    start = {i: state.initial[0][int(sim.ctx.fed.position[i])].double().numpy() for i in range(4)}
    ema = torch.cat(state.relatedness).double().numpy()
    cohort = sim.ctx.fed.cohorts[0]
    idx, n = cohort._eval_subsample()
    x, y = (t.numpy() for t in cohort.train_rows(idx))
    n = n.numpy()
    classes = sim.ctx.fed.dataset.num_classes
    where = {(int(i), int(j)): h for h, (i, j) in enumerate(zip(src, dst, strict=True))}
    alpha, lam = sim.config.alpha, sim.config.lam_value

    expected = {i: t.copy() for i, t in theta.items()}
    expected_ema, weights = np.zeros_like(ema), []
    for h, (i, j) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        back = where[(j, i)]
        total = ema[h] + ema[back]
        a = np.clip(2 * (1.2 - total[0] / total[1]), 0, 1) if total[1] > 0 else 0.0
        weights.append(a)
        k = sel[h]
        assert np.array_equal(np.sort(k), np.sort(sel[back]))  # one selection for both ends
        expected[i][k] -= alpha * lam * a * (theta[i][k] - theta[j][k])
        p = int(sim.ctx.fed.position[i])
        m = min(int(n[p]), PROBE_SAMPLES)
        xs, ys = x[p, :m], y[p, :m]
        own = _probe_loss(theta[i], xs, ys, classes)
        nb, fg = theta[i].copy(), theta[i].copy()
        nb[k], fg[k] = theta[j][k], start[i][k]
        signal = np.array([_probe_loss(nb, xs, ys, classes) - own, _probe_loss(fg, xs, ys, classes) - own])
        expected_ema[h] = BETA * ema[h] + (1 - BETA) * signal
    sim.step()
    g = grads[-1][0].double().numpy()
    assert 0 < np.mean(weights) < 1  # some edges weigh, not all fully
    for i in range(4):
        want = expected[i] - alpha * g[int(sim.ctx.fed.position[i])]
        np.testing.assert_allclose(sim.theta(i).double().numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        torch.cat(state.relatedness).double().numpy(), expected_ema, rtol=1e-4, atol=1e-6
    )


def test_the_weights_are_symmetric_and_the_coupling_zero_sum() -> None:
    sim, _ = _sim()
    n = sim.ctx.fed.num_clients
    sim.ctx.gradient_source = lambda t: ([torch.zeros_like(x) for x in t], torch.zeros(n))
    sim.state.initial = [torch.zeros_like(t) for t in sim.state.thetas]  # forgetting costs: weights move
    total = torch.cat(sim.state.thetas).sum(0)
    for _ in range(5):
        sim.step()
        src, dst, _ = _half_edges(sim)
        a = torch.cat(sim.state.learned_weights).numpy()
        by_pair = dict(zip(zip(src.tolist(), dst.tolist(), strict=True), a.tolist(), strict=True))
        assert all(by_pair[(i, j)] == by_pair[(j, i)] for i, j in by_pair)
        assert ((a >= 0) & (a <= 1)).all()
    torch.testing.assert_close(torch.cat(sim.state.thetas).sum(0), total, rtol=0, atol=1e-5)


def test_the_two_numbers_per_half_edge_are_counted_in_the_bits(tmp_path) -> None:
    """Sent on rounds 0, EVERY, 2 EVERY: three exchanges in ``2 EVERY + 1`` rounds."""
    cfg = RunConfig(**{**LEARNED, "rounds": 2 * EVERY + 1})
    learned = execute(cfg, None).summary
    plain = execute(cfg.replace(edge_weights="graph"), None).summary
    half_edges = 2 * learned["num_edges"]
    assert learned["transmitted_bits"] - plain["transmitted_bits"] == 3 * half_edges * 2 * 32


def test_related_neighbours_weigh_more_than_unrelated_ones() -> None:
    """``synthetic-clusters``: edges within a cluster (related tasks) end with larger weights than
    edges between clusters, and the run records them (``checkpoint.pt``)."""
    sim = build_simulation(RunConfig(dataset="synthetic-clusters", rounds=100))
    for _ in range(100):
        sim.step()
    state = sim.state
    layout = state.layout
    src, dst = layout.graph.src[layout.order], layout.graph.dst[layout.order]
    groups = np.array(clusters_groups(30))
    a = torch.cat(state.learned_weights).numpy()
    same = groups[src] == groups[dst]
    assert a[same].mean() > a[~same].mean() + 0.2
    saved = sim.algorithm.checkpoint(state, sim.ctx)
    assert saved["edge_weights"][layout.order].numpy() == pytest.approx(a)  # per graph half-edge
    assert saved["edge_weights"].shape == (layout.graph.num_half_edges,)
    rounds = saved["edge_weight_rounds"].tolist()
    assert rounds == list(range(0, 100, EVERY)) and saved["edge_weight_history"].shape == (
        len(rounds),
        len(src) // 2,
    )
    last = saved["edge_weight_history"][-1].double()  # the last exchange's weights, per graph edge
    edge_of = layout.order // 2
    assert last[edge_of].numpy() == pytest.approx(a, abs=1e-6)


def test_common_initial_models_are_held_once_and_per_client_ones_in_full() -> None:
    """``init = common``: what forgetting returns to is one row a cohort (a stride-0 view), equal to
    the models the run started from and untouched by the steps; ``init = per-client``: a full copy."""
    sim, _ = _sim()
    start = [t.clone() for t in sim.state.thetas]
    held = sim.state.initial
    assert all(h.stride(0) == 0 and h.untyped_storage().nbytes() == h.shape[1] * 4 for h in held)
    for _ in range(3):
        sim.step()
    assert all(torch.equal(h, s) for h, s in zip(held, start, strict=True))
    assert not all(torch.equal(t, s) for t, s in zip(sim.state.thetas, start, strict=True))
    per_client = build_simulation(RunConfig(**{**LEARNED, "init": "per-client"}), graph=GRAPH)
    copies = per_client.state.initial
    assert all(c.stride(0) == c.shape[1] for c in copies)
    assert all(torch.equal(c, t) for c, t in zip(copies, per_client.state.thetas, strict=True))
    assert edge_weights.held_once(torch.ones(1, 3)).stride(0) == 3  # one row: a plain copy
