"""Faults: payload validation, dropped clients and lost messages, against hand-built
oracles (numpy rounds written from the paper's updates, a transport without fault handling)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from sheaf_fmtl.algorithms import ALGORITHMS
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.messages import EdgeLayout, EdgeTensor, Payload, ServerTensor
from sheaf_fmtl.metrics.results import read_metrics
from sheaf_fmtl.runtime.engine.faults import DropPlan, Faults, uniforms, validate
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.runtime.engine.transport import server_average
from sheaf_fmtl.runtime.run.loop import execute
from sheaf_fmtl.sheaf.graph import ClientGraph

from .._baselines_problems import config, federation, regression_dataset, restored_beside, simulation
from ..conftest import make_dataset

BODY_AND_HEAD = "tests._baselines_problems:tiny_network"  # two layers: what algorithm=partial needs

GRAPH = ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3], [0, 3], [0, 2]]))


class FixedPlan(DropPlan):
    """A drop plan with chosen clients out and links down per round (instead of random draws)."""

    def __init__(self, out: dict[int, Sequence[int]], down: dict[int, Sequence[int]]) -> None:
        super().__init__(seed=0)
        object.__setattr__(self, "out", out)
        object.__setattr__(self, "down", down)

    @property
    def active(self) -> bool:
        return True

    def sitting_out(self, round_: int, clients: np.ndarray) -> np.ndarray:
        return np.isin(clients, list(self.out.get(round_, ())))  # type: ignore[attr-defined]

    def link_up(self, round_: int, half_edges: np.ndarray) -> np.ndarray:
        return ~np.isin(half_edges, list(self.down.get(round_, ())))  # type: ignore[attr-defined]


def half_edge(graph: ClientGraph, i: int, j: int) -> int:
    return int(np.flatnonzero((graph.src == i) & (graph.dst == j))[0])


def install(sim: Simulation, plan: DropPlan) -> Faults:
    sim.transport.faults = Faults(plan, sim.ctx.graph)
    return sim.transport.faults


def freeze_gradients(sim: Simulation, seed: int = 0) -> list[torch.Tensor]:
    """Fixed gradients per cohort (so a round is a known affine map of the state)."""
    gen = torch.Generator().manual_seed(seed)
    grads = [0.1 * torch.randn(t.shape, generator=gen) for t in sim.state.thetas]
    n = sim.ctx.fed.num_clients
    sim.ctx.gradient_source = lambda thetas: ([g.clone() for g in grads], torch.zeros(n))
    return grads


# -- the plan's draws ------------------------------------------------------------------------------
def test_draws_depend_on_ids_not_on_who_draws() -> None:
    ids = np.arange(1000)
    full = uniforms(7, 11, 3, ids)
    part = uniforms(7, 11, 3, ids[[5, 999, 17]])
    np.testing.assert_array_equal(part, full[[5, 999, 17]])
    assert not np.array_equal(full, uniforms(7, 11, 4, ids))  # another round, other draws
    assert not np.array_equal(full, uniforms(8, 11, 3, ids))  # another seed
    assert 0.0 <= full.min() and full.max() < 1.0 and abs(full.mean() - 0.5) < 0.05
    plan = DropPlan(seed=1, drop_prob=0.2, link_drop_prob=0.3)
    out = np.stack([plan.sitting_out(r, np.arange(500)) for r in range(1, 21)])
    assert abs(out.mean() - 0.2) < 0.02
    delivered = plan.delivered(2, GRAPH)
    np.testing.assert_array_equal(plan.delivered(2, GRAPH, np.array([3, 1])), delivered[[3, 1]])
    gone = plan.sitting_out(2, np.arange(4))
    assert not delivered[gone[GRAPH.src] | gone[GRAPH.dst]].any()


@pytest.mark.parametrize("key", ["drop_prob", "link_drop_prob"])
@pytest.mark.parametrize("value", [1.0, -0.1, float("nan")])
def test_drop_probabilities_in_zero_one(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=key):
        RunConfig(**{key: value})
    assert getattr(RunConfig(**{key: 0.5}), key) == 0.5


# -- validation ------------------------------------------------------------------------------------
def test_validate_per_half_edge_shape_and_dtype() -> None:
    layout = EdgeLayout(np.array([2, 3, 1]), np.array([0, 1, 2]))
    data = torch.arange(6.0)
    for bad, expected in [(None, [1, 1, 1]), (1, [0, 1, 1]), (4, [1, 0, 1]), (5, [1, 1, 0])]:
        d = data.clone()
        if bad is not None:
            d[bad] = float("nan") if bad != 4 else float("inf")
        _, ok = validate(d, layout)
        assert ok.tolist() == [bool(e) for e in expected]
    for wrong in (torch.arange(5.0), torch.arange(6), torch.arange(6.0).view(2, 3)):
        out, ok = validate(wrong, layout)
        assert not ok.any() and out.shape == (6,) and not out.any()
    _, ok = validate(torch.arange(6.0), layout, torch.float64)  # an expected dtype
    assert not ok.any()
    even = EdgeLayout(np.array([2, 2]), np.array([1, 0]))  # equal segments: the [H, d] path
    assert validate(torch.tensor([1.0, float("nan"), 3.0, 4.0]), even)[1].tolist() == [False, True]


def test_server_average_over_accepted_rows() -> None:
    data = torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [5.0, 10.0]])
    avg = server_average(data, torch.tensor([1.0, 1.0, 3.0]), torch.tensor([True, False, True]))
    torch.testing.assert_close(avg, torch.tensor([4.0, 8.0]))
    none = server_average(data, torch.ones(3), torch.zeros(3, dtype=torch.bool))
    assert torch.equal(none, torch.zeros(2))


# -- rejected payloads in a run --------------------------------------------------------------------
def corrupt(sim: Simulation, rounds: set[int], how: str, name: str, position: int = 0) -> None:
    """Make the algorithm's sends bad in ``rounds`` (first exchange of the round only)."""
    send, state = sim.algorithm.send, {"round": 0, "phase": -1}

    def bad_send(st, phase, ctx) -> Payload:  # noqa: ANN001
        if phase == 0:
            state["round"] += 1
        payload = send(st, phase, ctx)
        if state["round"] in rounds and phase == 0:
            item = payload[name]
            assert isinstance(item, EdgeTensor)
            data = item.data.clone()
            if how == "nan":
                start = int(item.layout.offsets[position])
                data[start] = float("nan")
            else:
                data = data[:-1]
            payload[name] = EdgeTensor(data, item.layout)
        return payload

    sim.algorithm.send = bad_send  # type: ignore[method-assign]


def sheaf_sim(mode: str = "literal", eta: float = 0.05) -> Simulation:
    cfg = RunConfig(
        batch_size=0,
        lam=0.3,
        alpha=0.1,
        eta=eta,
        gamma=0.6,
        l2=0.01,
        message_mode=mode,
        map_defer=1,
        maps="learned",
        local_epochs=0,
    )
    fed = build_federation(make_dataset([3, 5, 3, 4]), "logistic", l2=cfg.l2)
    return build_simulation(cfg, fed=fed, graph=GRAPH)


def test_nan_payload_is_rejected_and_equals_a_lost_message() -> None:
    sim, lost, clean = sheaf_sim(), sheaf_sim(), sheaf_sim()
    layout = sim.state.layout
    h = half_edge(GRAPH, 2, 3)  # client 2's message to client 3
    corrupt(sim, {1}, "nan", "msg", position=int(layout.slot[h]))
    install(lost, FixedPlan({}, {1: [h]}))
    for s in (sim, lost, clean):
        freeze_gradients(s)
        s.step()
    assert sim.finite()
    assert sim.transport.faults.counts() == {"rejected_messages": 1, "dropped_messages": 0}
    # the theta step (first exchange) equals the one without 2 -> 3; the oracle also lost the map step's
    for i in range(4):
        torch.testing.assert_close(sim.theta(i), lost.theta(i), rtol=1e-6, atol=1e-7)
    assert not torch.allclose(sim.theta(3), clean.theta(3))
    torch.testing.assert_close(sim.theta(2), clean.theta(2))


def test_misshaped_payload_is_rejected_whole_and_the_run_stays_finite(tmp_path) -> None:
    sim = simulation("dfedu", batch_size=0)
    grads = freeze_gradients(sim)
    corrupt(sim, {2}, "truncate", "model")
    sim.step()
    before = sim.state.thetas[0].clone()
    sim.step()  # every message of round 2 is rejected: the round is a local step
    torch.testing.assert_close(sim.state.thetas[0], before - sim.config.alpha * grads[0])
    h, d = sim.ctx.graph.num_half_edges, sim.state.thetas[0].shape[1]
    assert sim.transport.faults.counts() == {"rejected_messages": h, "dropped_messages": 0}
    assert sim.transport.bits == 2 * h * d * 32 - 32  # what was sent, the bad buffer included
    sim.step()
    assert sim.finite()


# -- dropped clients and links against an oracle ---------------------------------------------------
def oracle_round(
    theta: dict[int, np.ndarray],
    maps: dict[tuple[int, int], np.ndarray],
    grads: dict[int, np.ndarray],
    theta_heard: set[tuple[int, int]],
    map_heard: set[tuple[int, int]],
    out: set[int],
    cfg: RunConfig,
) -> tuple[dict[int, np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """One Sheaf-FMTL round in numpy (paper eqs. (18) thetaupdate, (19) pijaupdate); ``(i, j)`` heard: client
    ``i`` received ``j``'s message; clients in ``out`` keep their theta and maps."""
    new = {}
    for i, t in theta.items():
        if i in out:
            new[i] = t
            continue
        c = sum(
            (maps[i, j].T @ (maps[i, j] @ t - maps[j, i] @ theta[j]) for (a, j) in theta_heard if a == i),
            np.zeros_like(t),
        )
        new[i] = t - cfg.alpha * (grads[i] + cfg.lam * c)
    new_maps = dict(maps)
    for i, j in map_heard:
        if i not in out:
            r = maps[i, j] @ new[i] - maps[j, i] @ new[j]
            new_maps[i, j] = maps[i, j] - cfg.eta * cfg.lam * np.outer(r, new[i])
    return new, new_maps


def sim_arrays(sim: Simulation):  # noqa: ANN201
    theta = {i: sim.theta(i).double().numpy().copy() for i in range(4)}
    return theta, {k: v.double().numpy().copy() for k, v in sim.maps().items()}


@pytest.mark.parametrize("mode", ["literal", "compact"])
def test_sheaf_rounds_with_drops_equal_the_oracle(mode: str) -> None:
    sim = sheaf_sim(mode)
    e01 = [half_edge(GRAPH, 0, 1), half_edge(GRAPH, 1, 0)]
    # round 1: edge {0, 1} lost both ways, and 2 -> 3 lost; round 2: client 2 sits out
    install(sim, FixedPlan({2: [2]}, {1: [*e01, half_edge(GRAPH, 2, 3)]}))
    g = freeze_gradients(sim)
    fed = sim.ctx.fed
    grads = {i: g[fed.cohort_of[i]][fed.position[i]].double().numpy() for i in range(4)}
    every = {(int(a), int(b)) for a, b in zip(GRAPH.src, GRAPH.dst, strict=True)}
    heard1 = every - {(0, 1), (1, 0), (3, 2)}
    heard2 = {(i, j) for i, j in every if 2 not in (i, j)}
    cfg = sim.config
    theta, maps = sim_arrays(sim)
    theta, maps = oracle_round(theta, maps, grads, heard1, heard1, set(), cfg)
    sim.step()
    got_theta, got_maps = sim_arrays(sim)
    for i in range(4):
        np.testing.assert_allclose(got_theta[i], theta[i], rtol=1e-5, atol=1e-6)
    for k in maps:
        np.testing.assert_allclose(got_maps[k], maps[k], rtol=1e-5, atol=1e-6)
    # compact: round 2's theta step uses the messages of round 1's map step (and what was lost there)
    theta_heard = heard1 if mode == "compact" else heard2
    theta, maps = oracle_round(theta, maps, grads, theta_heard, heard2, {2}, cfg)
    sim.step()
    got_theta, got_maps = sim_arrays(sim)
    for i in range(4):
        np.testing.assert_allclose(got_theta[i], theta[i], rtol=1e-5, atol=1e-6)
    for k in maps:
        np.testing.assert_allclose(got_maps[k], maps[k], rtol=1e-5, atol=1e-6)
    # round 1: 3 half-edges in 2 exchanges; round 2: client 2's 6 half-edges, 2 exchanges (literal) or 1
    assert sim.transport.faults.counts()["dropped_messages"] == (18 if mode == "literal" else 12)


def test_dpsgd_renormalises_over_neighbours_heard() -> None:
    sim = simulation("dpsgd", batch_size=0, local_steps=1)
    graph = sim.ctx.graph  # path 0 - 1 - 2
    install(sim, FixedPlan({}, {1: [half_edge(graph, 2, 1)]}))
    g = freeze_gradients(sim)[0].double().numpy()
    x = sim.state.thetas[0].double().numpy().copy()
    sim.step()
    w = 1.0 / 3.0  # Metropolis: max degree 2 on every edge
    expected = (
        np.stack(
            [
                (1 - w) * x[0] + w * x[1],
                ((1 - 2 * w) * x[1] + w * x[0]) / (1 - w),  # did not hear client 2
                (1 - w) * x[2] + w * x[1],
            ]
        )
        - sim.config.alpha * g
    )
    np.testing.assert_allclose(sim.state.thetas[0].double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_server_averages_over_reporting_clients_and_absent_ones_keep_their_model() -> None:
    sim = simulation("fedavg", batch_size=0, local_steps=1)
    install(sim, FixedPlan({1: [1]}, {}))
    g = freeze_gradients(sim)[0]
    w0 = sim.state.global_copies.clone()
    n = sim.ctx.fed.cohorts[0].n_train.to(torch.float32)
    sim.step()
    trained = w0 - sim.config.alpha * g
    avg = (n[0] * trained[0] + n[2] * trained[2]) / (n[0] + n[2])
    torch.testing.assert_close(sim.state.global_copies[[0, 2]], avg.expand(2, -1))
    torch.testing.assert_close(sim.state.global_copies[1], w0[1])
    torch.testing.assert_close(sim.state.thetas[0][1], w0[1])
    d = w0.shape[1]
    assert sim.transport.bits == 2 * 2 * d * 32  # two clients up, two down
    assert sim.transport.faults.counts() == {"rejected_messages": 0, "dropped_messages": 2}


# -- bits ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["dfedu", "sheaf-fmtl"])
def test_bits_exclude_dropped_messages_exactly(algorithm: str) -> None:
    graph = ClientGraph(5, np.array([[0, 1], [1, 2], [2, 3], [3, 4], [0, 4], [1, 3]]))
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9, 10)))
    cfg = config(algorithm, drop_prob=0.2, link_drop_prob=0.3)
    sim = build_simulation(cfg, fed=fed, graph=graph)
    plan = DropPlan(sim.config.seed, 0.2, 0.3)
    if algorithm == "dfedu":  # one exchange a round, d floats per half-edge
        per_h = np.full(graph.num_half_edges, fed.cohorts[0].dim)
        exchanges = 1
    else:  # literal mode, eta > 0: two exchanges of d_ij floats a round
        layout = sim.state.layout
        per_h = np.empty(graph.num_half_edges, np.int64)
        per_h[layout.order] = layout.messages.sizes
        exchanges = 2
    expected = lost = 0
    for r in range(1, 9):
        sim.step()
        delivered = plan.delivered(r, graph)
        expected += exchanges * int(per_h[delivered].sum()) * 32
        lost += exchanges * int((~delivered).sum())
    assert 0 < lost < 8 * exchanges * graph.num_half_edges
    assert sim.transport.bits == expected
    assert sim.transport.faults.counts() == {"rejected_messages": 0, "dropped_messages": lost}


# -- whole runs ------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_dropout_runs_of_every_algorithm_finish(algorithm: str, tmp_path) -> None:
    cfg = RunConfig(
        algorithm=algorithm,
        dataset="synthetic",
        clients=6,
        rounds=4,
        eval_every=2,
        graph="complete",
        drop_prob=0.3,
        link_drop_prob=0.3,
        data={"features": 5, "classes": 3, "min_samples": 20, "max_samples": 40},
        model=BODY_AND_HEAD if algorithm == "partial" else "auto",  # (a personal head needs a body)
    )
    out = execute(cfg, tmp_path / "run")
    assert out.summary["status"] == "ok" and np.isfinite(out.summary["final"])
    assert out.summary["dropped_messages"] > 0 or algorithm == "local"
    metrics = read_metrics(tmp_path / "run")
    assert metrics["dropped_messages"][-1] == out.summary["dropped_messages"]
    assert metrics["rejected_messages"] == [0.0, 0.0, 0.0]


class PlainTransport:
    """The exchange without any fault handling (the code before faults): one gather per edge
    buffer, one weighted average per server buffer, nothing marked as heard."""

    def __init__(self) -> None:
        self.bits = 0
        self.faults = Faults()

    def exchange(self, payload: Payload) -> Payload:
        out: Payload = {}
        for name, item in payload.items():
            if isinstance(item, ServerTensor):
                avg = server_average(item.data, item.weights)
                out[name] = ServerTensor(avg.unsqueeze(0).expand_as(item.data), item.weights)
            else:
                data = item.data.index_select(0, item.layout.exchange_index(item.data.device))
                out[name] = EdgeTensor(data, item.layout.reversed())
        return out


@pytest.mark.parametrize("algorithm", sorted(set(ALGORITHMS) - {"local"}))
@pytest.mark.parametrize("mode", ["compact", "literal"])
def test_no_drops_is_bit_identical_to_no_fault_handling(algorithm: str, mode: str) -> None:
    if mode == "literal" and algorithm != "sheaf-fmtl":
        pytest.skip("message_mode is Sheaf-FMTL's")
    runs = []
    for plain in (False, True):
        fed = federation(model=BODY_AND_HEAD) if algorithm == "partial" else None
        sim = simulation(algorithm, fed, batch_size=4, message_mode=mode, lam=0.1)
        if plain:
            sim.transport = PlainTransport()
        for _ in range(4):
            sim.step()
        runs.append(sim)
    for a, b in zip(runs[0].state.thetas, runs[1].state.thetas, strict=True):
        assert torch.equal(a, b)
    assert runs[0].transport.faults.counts() == {"rejected_messages": 0, "dropped_messages": 0}


@pytest.mark.parametrize("name", ["sheaf-compact-defer3", "sheaf-hetero-cohorts", "dpsgd", "fedavg"])
def test_a_round_with_drops_reads_nothing_back(name: str) -> None:
    """Validation and counts stay on the device (the audit of ``test_hot_path_host.py``, with clients
    sitting out and links down); the plan's masks are built on the host and copied non-blocking
    (``to_device``, allowed here; on CUDA ``test_drops_do_not_sync_on_cuda`` checks the copies)."""
    from ..algorithms.test_hot_path_host import HostReads, _known, host_tensors
    from ..test_cuda import BY_NAME, build

    sim = build(BY_NAME[name], "cpu")
    faults = install(sim, DropPlan(seed=0, drop_prob=0.3, link_drop_prob=0.3))
    sim.step()
    mode = HostReads(host_tensors(sim))
    with mode:
        for _ in range(2):
            sim.step()
    unexpected = {k: n for k, n in mode.found.items() if not _known(k) and "to_device" not in k}
    assert not unexpected, "\n".join(f"{n}x {k}" for k, n in unexpected.items())
    assert faults.counts()["dropped_messages"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["sheaf-compact-defer3", "dpsgd", "fedavg"])
def test_drops_do_not_sync_on_cuda(name: str) -> None:
    from ..test_cuda import BY_NAME, build, host_syncs

    sim = build(BY_NAME[name], "cuda")
    install(sim, DropPlan(seed=0, drop_prob=0.3, link_drop_prob=0.3))
    sim.step()
    with host_syncs() as found:
        for _ in range(3):
            sim.step()
    assert not found, found
    assert sim.finite()


@pytest.mark.parametrize("algorithm", ["sheaf-fmtl", "fedavg"])
def test_a_restored_snapshot_continues_the_same_drops(algorithm: str) -> None:
    """A run restored from a checkpoint shard draws the same drops as the uninterrupted run (the
    plan's round and the counts travel in the shard)."""

    def build() -> Simulation:
        cfg = config(algorithm, message_mode="compact", drop_prob=0.3, link_drop_prob=0.3, batch_size=4)
        return build_simulation(cfg, fed=federation(regression_dataset(sizes=(6, 7, 8, 9))), graph=GRAPH)

    whole, resumed = restored_beside(build, 3, 3)
    for a, b in zip(whole.state.thetas, resumed.state.thetas, strict=True):
        assert torch.equal(a, b)
    assert resumed.transport.faults.counts() == whole.transport.faults.counts()
    assert resumed.transport.bits == whole.transport.bits
