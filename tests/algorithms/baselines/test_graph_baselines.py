"""The two baselines that learn a collaboration graph: pFedGraph's graph step (the simplex projection
against its QP solved by scipy and by enumeration of supports, one round's mixing against a dense numpy
computation), DPFL's greedy choice against a naive loop, the held-out split, the bits, the saved
weights, and learning on small problems."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.optimize
import torch

from sheaf_fmtl.algorithms.baselines.dpfl import exchange_round, greedy_choice, holdout_counts, split_holdout
from sheaf_fmtl.algorithms.baselines.pfedgraph import collaboration_weights, simplex_projection
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf.graph import ClientGraph
from tests._baselines_problems import (
    L2,
    client_arrays,
    federation,
    grads,
    regression_dataset,
    simulation,
    thetas_np,
)

ALPHA, LAM, GRAPH_ALPHA = 0.05, 0.1, 0.8


def _projection_by_supports(v: np.ndarray) -> np.ndarray:
    """The projection of ``v`` onto the simplex by trying every support (the KKT point that is feasible)."""
    best, best_d = None, np.inf
    for k in range(1, len(v) + 1):
        for s in itertools.combinations(range(len(v)), k):
            tau = (v[list(s)].sum() - 1.0) / k
            x = np.where(np.isin(np.arange(len(v)), s), v - tau, 0.0)
            if (x[list(s)] >= -1e-12).all() and np.sum((x - v) ** 2) < best_d:
                best, best_d = x, np.sum((x - v) ** 2)
    assert best is not None
    return best


def _qp(diff: np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """pFedGraph's QP as written: ``min x^T (alpha I) x + (diff - 2 alpha p)^T x`` on the simplex."""
    q = diff - 2 * alpha * p
    res = scipy.optimize.minimize(
        lambda x: alpha * x @ x + q @ x,
        np.full(len(p), 1.0 / len(p)),
        jac=lambda x: 2 * alpha * x + q,
        bounds=[(0, None)] * len(p),
        constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    return np.asarray(res.x)


def test_simplex_projection_equals_enumeration_and_the_qp() -> None:
    rng = np.random.default_rng(0)
    sizes = [1, 2, 3, 5, 4, 1, 6]
    groups = np.repeat(np.arange(len(sizes)), sizes)
    perm = rng.permutation(len(groups))  # groups interleaved, as half-edges and clients are
    values = rng.normal(scale=1.5, size=len(groups))
    got = simplex_projection(torch.as_tensor(values[perm]), torch.as_tensor(groups[perm]), len(sizes)).numpy()
    out = np.empty_like(got)
    out[perm] = got
    for g in range(len(sizes)):
        v = values[groups == g]
        np.testing.assert_allclose(out[groups == g], _projection_by_supports(v), atol=1e-12)
        p = rng.dirichlet(np.ones(len(v)))
        diff = rng.uniform(-1, 1, size=len(v))
        x = simplex_projection(
            torch.as_tensor(p - diff / (2 * GRAPH_ALPHA)), torch.zeros(len(v), dtype=torch.long), 1
        )
        np.testing.assert_allclose(x.numpy(), _qp(diff, p, GRAPH_ALPHA), atol=1e-6)


def _graph_rows(x: np.ndarray, x0: np.ndarray, graph: ClientGraph, n: np.ndarray) -> np.ndarray:
    """Dense ``[N, N]`` collaboration graph of pFedGraph's step, client by client, with scipy's QP."""
    u = x - x0
    w = np.zeros((len(x), len(x)))
    for i in range(len(x)):
        group = [i, *graph.neighbors(i)]
        cos = np.array([u[i] @ u[j] / np.linalg.norm(u[i]) / np.linalg.norm(u[j]) for j in group])
        diff = np.where(-cos < -0.9, -1.0, -cos)
        w[i, group] = _qp(diff, n[group] / n[group].sum(), GRAPH_ALPHA)
    return w


def test_pfedgraph_two_rounds_equal_a_dense_computation() -> None:
    """Round 1: a gradient step, the graph from the updates' cosines, the mix; round 2 adds the pull
    ``-lam (c - <c, u> u) / ||theta||`` towards ``c_i = sum_j w_ij theta_j / ||theta_j||``."""
    data = regression_dataset(sizes=(6, 8, 10, 7))
    graph = ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3], [0, 2]]))
    sim = simulation("pfedgraph", federation(data), graph, alpha=ALPHA, lam=LAM, pfedgraph_alpha=GRAPH_ALPHA)
    xy, n = client_arrays(data), np.array([6.0, 8.0, 10.0, 7.0])
    x = thetas_np(sim)
    x0 = x[0].copy()
    anchor = np.zeros_like(x)
    for _ in range(2):
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        u = x / norm
        pull = -LAM * (anchor - (anchor * u).sum(1, keepdims=True) * u) / norm
        x = x - ALPHA * (grads(x, xy, L2) + pull)
        w = _graph_rows(x, x0, graph, n)
        anchor = w @ (x / np.linalg.norm(x, axis=1, keepdims=True))
        x = w @ x
        sim.step()
        np.testing.assert_allclose(thetas_np(sim), x, rtol=1e-4, atol=1e-5)
    saved = sim.algorithm.checkpoint(sim.state, sim.ctx)["edge_weights"].numpy()
    np.testing.assert_allclose(saved, w[graph.src, graph.dst], atol=1e-4)


def test_collaboration_weights_rows_sum_to_one_and_favour_similar_updates() -> None:
    graph = ClientGraph(3, np.array([[0, 1], [0, 2], [1, 2]]))
    origin = torch.zeros(4)
    thetas = torch.tensor([[1.0, 0, 0, 0], [1.0, 0.1, 0, 0], [-1.0, 0, 1.0, 0]])
    w_half, w_self = collaboration_weights(graph, thetas, origin, np.array([10.0, 10.0, 10.0]))
    rows = w_self + np.bincount(graph.src, weights=w_half, minlength=3)
    np.testing.assert_allclose(rows, 1.0, atol=1e-12)
    w = dict(zip(zip(graph.src.tolist(), graph.dst.tolist(), strict=True), w_half, strict=True))
    assert w[(0, 1)] > w[(0, 2)] and w[(1, 0)] > w[(1, 2)]


def test_pfedgraph_refuses_per_client_initial_models() -> None:
    with pytest.raises(ConfigError, match="init=common"):
        simulation("pfedgraph", init="per-client")


def _naive_greedy(target, own, theirs, src, dst, n, cand, budget):  # noqa: ANN001, ANN202
    """Client by client: add the candidate whose inclusion lowers ``||avg - target_i||^2`` most."""
    chosen = np.zeros(len(src), bool)
    mixed = own.copy()
    for i in range(len(own)):
        members = [(n[i], own[i])]
        loss = np.sum((own[i] - target[i]) ** 2)
        for _ in range(budget):
            best, best_q = loss, None
            for q in np.flatnonzero((src == i) & cand & ~chosen):
                trial = members + [(n[dst[q]], theirs[q])]
                avg = sum(w * m for w, m in trial) / sum(w for w, _ in trial)
                f = np.sum((avg - target[i]) ** 2)
                if f < best:
                    best, best_q = f, q
            if best_q is None:
                break
            chosen[best_q], loss = True, best
            members.append((n[dst[best_q]], theirs[best_q]))
        mixed[i] = sum(w * m for w, m in members) / sum(w for w, _ in members)
    return chosen, mixed


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_dpfl_greedy_equals_a_naive_loop(budget: int) -> None:
    rng = np.random.default_rng(budget)
    graph = ClientGraph(6, np.array([[0, 1], [0, 2], [0, 3], [1, 2], [2, 3], [3, 4], [4, 5], [1, 5], [0, 5]]))
    own = rng.normal(size=(6, 3))
    target = own + rng.normal(scale=0.8, size=(6, 3))
    theirs = own[graph.dst]
    n = rng.integers(5, 20, size=6).astype(float)
    cand = rng.random(len(graph.src)) < 0.8
    src = torch.as_tensor(graph.src)
    t = torch.as_tensor(target)

    def losses(models: torch.Tensor, who: torch.Tensor) -> torch.Tensor:
        return ((models - t.index_select(0, who)) ** 2).sum(1)

    sizes = (torch.as_tensor(n), torch.as_tensor(n[graph.dst]))
    chosen, mixed = greedy_choice(
        losses, torch.as_tensor(own), torch.as_tensor(theirs), src, sizes, torch.as_tensor(cand), budget
    )
    want_chosen, want_mixed = _naive_greedy(target, own, theirs, graph.src, graph.dst, n, cand, budget)
    np.testing.assert_array_equal(chosen.numpy(), want_chosen)
    np.testing.assert_allclose(mixed.numpy(), want_mixed, atol=1e-12)
    assert chosen.numpy().sum() > 0  # the problem makes the choice matter
    never_worse = ((mixed.numpy() - target) ** 2).sum(1) <= ((own - target) ** 2).sum(1) + 1e-12
    assert never_worse.all()


def test_holdout_is_disjoint_from_training_and_drawn_per_client() -> None:
    assert holdout_counts(np.array([1, 2, 5, 10, 11]), 0.2).tolist() == [0, 1, 1, 2, 2]
    data = regression_dataset(sizes=(6, 8, 10, 3))
    fed = federation(data)
    view, held = split_holdout(fed, 0.3, seed=4)
    c, train, h = fed.cohorts[0], view.cohorts[0], held[0]
    assert train.n_train.tolist() == [5, 6, 7, 2] and h.n.tolist() == [1, 2, 3, 1]
    assert view.train_sizes.tolist() == [5, 6, 7, 2] and fed.cohorts[0] is c  # the federation unchanged
    for k in range(4):
        n, m = int(train.n_train[k]), int(h.n[k])
        rows = torch.cat([train.y_train[k, :n], h.y[k, :m]]).sort().values
        torch.testing.assert_close(rows, c.y_train[k, : int(c.n_train[k])].sort().values)
    again = split_holdout(fed, 0.3, seed=4)[1][0]
    torch.testing.assert_close(again.y, h.y)


def test_holdout_of_a_shard_keeps_the_common_initial_model_of_the_whole_federation() -> None:
    """A rank holding clients 2 and 3 only: after the holdout its cohort still draws the common initial
    model from the architecture's first client (0), as the whole federation does; its kept fields
    (objective, first client, kernel) are the cohort's."""
    data = regression_dataset(sizes=(6, 8, 10, 12))
    whole = split_holdout(federation(data), 0.3, seed=4)[0].cohorts[0]
    shard = build_federation(data, "linear", l2=L2, clients=[2, 3])
    before = shard.cohorts[0]
    after = split_holdout(shard, 0.3, seed=4)[0].cohorts[0]
    assert before.first_client == after.first_client == 0
    for kept in ("loss_fn", "metric_fn", "cnn_kernel"):
        assert getattr(after, kept) == getattr(before, kept), kept
    expected = whole.init_thetas(seed=5, common=True)[0]
    assert not torch.equal(expected, before.init_thetas_for([2], seed=5, stream=8)[0])  # (the oracle tells)
    for row in after.init_thetas(seed=5, common=True):
        torch.testing.assert_close(row, expected, rtol=0, atol=0)


def test_dpfl_exchanges_on_its_schedule_and_counts_whole_models() -> None:
    assert [t for t in range(9) if exchange_round(t, 2)] == [2, 4, 6, 8]
    assert [t for t in range(5) if exchange_round(t, 1)] == [2, 3, 4]
    data = regression_dataset(sizes=(12, 14, 16, 10))
    graph = ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3]]))
    sim = simulation("dpfl", federation(data), graph, batch_size=4, dpfl_budget=2)
    d = sim.ctx.fed.cohorts[0].dim
    for _ in range(5):
        sim.step()
    assert sim.transport.bits == 2 * 32 * d * 6  # rounds 2 and 4: a model along every half-edge
    saved = sim.algorithm.checkpoint(sim.state, sim.ctx)["edge_weights"].numpy()
    chosen = sim.state.chosen.numpy()
    assert saved.shape == (6,) and ((saved > 0) == chosen).all() and (saved <= 1).all()
    assert sim.state.exchanges == 2 and (chosen <= sim.state.candidates.numpy()).all()  # among the first


def _final(algorithm: str, rounds: int, seed: int = 3, **keys: object) -> float:
    sim = build_simulation(RunConfig(algorithm=algorithm, rounds=rounds, seed=seed, **keys))  # type: ignore[arg-type]
    for _ in range(rounds):
        sim.step()
    return float(sim.evaluate()["test_metric"])


#: ``synthetic-clusters`` with every feature seen and more samples (40 to 100 a client): a held-out
#: fifth of a client's data is then enough to tell related neighbours from the others.
CLUSTERS = {
    "dataset": "synthetic-clusters",
    "data": {"homogeneous": True, "min_samples": 40, "max_samples": 100},
}


def test_dpfl_learns_above_local_training_on_related_clients() -> None:
    assert _final("dpfl", 40, **CLUSTERS) > _final("local", 40, **CLUSTERS) + 0.005


def test_pfedgraph_is_about_as_good_as_local_training_on_related_clients() -> None:
    """With its protocol's longer local training (5 epochs a round); at one epoch a round the
    updates from the common start soon agree and its graph averages every neighbour (the page)."""
    keys = {**CLUSTERS, "local_epochs": 5}
    assert _final("pfedgraph", 40, **keys) > _final("local", 40, **keys) - 0.01
