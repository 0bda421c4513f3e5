"""FLOPs and peak memory of a run: per-sample counts against hand counts, the analytic sheaf term
against a hand count and against the products the algorithm actually takes, the summary fields."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.metrics import flops
from sheaf_fmtl.metrics.memory import peak_memory, reset_peak_memory
from sheaf_fmtl.models.linear import linear, logistic
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.runtime.run.loop import run
from sheaf_fmtl.sheaf import ops
from sheaf_fmtl.sheaf.deferred import DeferredMaps
from sheaf_fmtl.sheaf.graph import ClientGraph
from sheaf_fmtl.sheaf.layout import build_layout

from ..conftest import make_dataset


def test_linear_layer_flops_match_a_hand_count():
    # forward W x: 2 in out; backward: grad W = dz x^T, 2 in out; no grad w.r.t. the input
    assert flops.measured_flops(nn.Linear(5, 3), (5,), "classification") == 4 * 5 * 3
    assert flops.measured_flops(nn.Linear(7, 1), (7,), "regression") == 4 * 7
    # the tabular models' closed form (no FlopCounterMode) is the same count
    tabular = ((logistic((5,), 3), (5,), "classification"), (linear((2, 4)), (2, 4), "regression"))
    for model, shape, task in tabular:
        assert flops.per_sample_flops(model, shape, task) == flops.measured_flops(model, shape, task)


def test_conv_layer_flops_match_a_hand_count():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    conv = 2 * (2 * 4 * 4) * (1 * 3 * 3)  # 32 outputs, 9 multiply-adds each
    dense = 2 * 32 * 3
    # conv: forward + weight gradient (its input needs none); dense: forward, weight and input grads
    assert flops.per_sample_flops(model, (1, 6, 6), "classification") == 2 * conv + 3 * dense


def _path_layout(gamma: float = 0.5):
    graph = ClientGraph(3, np.array([[0, 1], [1, 2]]))
    return build_layout(graph, [4, 6, 10], [0, 1, 2], gamma)


def test_sheaf_flops_of_a_tiny_graph_match_a_hand_count():
    layout = _path_layout()
    # d_01 = floor(0.5 * 4) = 2, d_12 = floor(0.5 * 6) = 3; M = sum over half-edges d_ij d_i
    m = 2 * 4 + 2 * 6 + 3 * 6 + 3 * 10
    assert flops.map_elements(layout) == m == 68
    # a round: 1 message, 1 map step, 1 coupling
    cfg = RunConfig(lam=0.1, eta=0.01, maps="learned", local_epochs=1)
    assert flops.sheaf_flops(cfg, layout, rounds=5) == 2 * m * 15
    # Algorithm 1, compact: round 1 greets, then 1 message a round
    cfg = RunConfig(lam=0.1, eta=0.01, maps="learned", local_epochs=0)
    assert flops.sheaf_flops(cfg, layout, rounds=5) == 2 * m * (6 + 5 + 5)
    # fixed maps: message + coupling every round
    cfg = RunConfig(lam=0.1, eta=0.0, maps="learned", local_epochs=0)
    assert flops.sheaf_flops(cfg, layout, rounds=5) == 2 * m * 10


def test_sheaf_flops_match_flopcounter_on_dense_ops():
    """One local-epochs round, literal mode, done densely per half-edge with matmuls."""
    layout = _path_layout()
    g = torch.Generator().manual_seed(0)
    dims = [4, 6, 10]
    thetas = [torch.randn(d, 1, generator=g) for d in dims]
    edges = {(0, 1): 2, (1, 2): 3}
    maps = {}
    for (i, j), de in edges.items():
        maps[i, j] = torch.randn(de, dims[i], generator=g)
        maps[j, i] = torch.randn(de, dims[j], generator=g)
    with FlopCounterMode(display=False) as counter:
        for _ in range(2):  # messages before and after the map step
            msg = {(i, j): maps[i, j] @ thetas[i] for (i, j) in maps}
        for i, j in maps:  # rank-one map step P_ij <- P_ij - eta lam r_ij theta_i^T
            r = msg[i, j] - msg[j, i]
            maps[i, j] = torch.addmm(maps[i, j], r, thetas[i].T, alpha=-0.01)
        for i, j in maps:  # coupling P_ij^T r_ij
            maps[i, j].T @ (msg[i, j] - msg[j, i])
    cfg = RunConfig(lam=0.1, eta=0.01, maps="learned", local_epochs=1, message_mode="literal")
    assert flops.sheaf_flops(cfg, layout, rounds=1) == counter.get_total_flops()


@pytest.mark.parametrize(
    "keys",
    [
        {},
        {"message_mode": "literal"},
        {"eta": 0.0, "local_steps": 2},
        {"local_steps": 3},
        {"local_epochs": 1},
        {"local_epochs": 1, "message_mode": "literal"},
        {"local_epochs": 1, "eta": 0.0},
    ],
)
def test_sheaf_products_are_those_the_algorithm_takes(keys, monkeypatch):
    keys = {"maps": "learned", "local_epochs": 0, **keys}  # Algorithm 1 unless the case says otherwise
    cfg = RunConfig(algorithm="sheaf-fmtl", rounds=4, lam=0.05, map_defer=1, batch_size=4, **keys)
    fed = build_federation(make_dataset([3, 5, 3, 4]), l2=1e-4)
    sim = build_simulation(cfg, fed=fed, graph=ClientGraph(4, np.array([[0, 1], [1, 2], [2, 3], [0, 3]])))
    calls = {"messages": 0, "coupling": 0, "map_steps": 0}

    def counting(name, fn):  # noqa: ANN001, ANN202
        def wrapped(*a, **k):  # noqa: ANN002, ANN003, ANN202
            calls[name] += 1
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(ops, "messages", counting("messages", ops.messages))
    monkeypatch.setattr(ops, "transpose_sum", counting("coupling", ops.transpose_sum))
    monkeypatch.setattr(DeferredMaps, "add_rank_one", counting("map_steps", DeferredMaps.add_rank_one))
    for _ in range(cfg.rounds):
        sim.step()
    calls["map_steps"] //= len(sim.state.layout.buckets)  # one call per bucket
    assert flops.sheaf_products(cfg, cfg.rounds) == calls


def test_summary_carries_flops_and_memory(tmp_path):
    data = make_dataset([3, 5, 3, 4, 5, 3])
    rounds, classes = 3, 3
    cfg = RunConfig(algorithm="local", rounds=rounds, batch_size=0, eval_every=3)
    fed = build_federation(data, l2=1e-4)
    s = run(cfg, tmp_path / "local", progress=False, sim=build_simulation(cfg, fed=fed))
    # full batches, one step a round: every training sample once a round, 4 d_in C FLOPs each
    hand = rounds * sum(len(c.y_train) * 4 * c.x_train.shape[1] * classes for c in data.clients)
    assert s["flops_local"] == hand and s["flops_sheaf"] == 0 and s["flops"] == hand
    assert s["peak_rss_bytes"] > 0 and s["cuda_max_allocated_bytes"] is None
    assert s["evaluated_on"] == "test"

    gamma = 0.5
    cfg = RunConfig(
        rounds=rounds,
        lam=0.05,
        gamma=gamma,
        eval_every=3,
        graph="complete",
        batch_size=4,
        maps="learned",
        local_epochs=0,
    )
    s = run(cfg, tmp_path / "sheaf", progress=False, sim=build_simulation(cfg, fed=build_federation(data)))
    dims = [(c.x_train.shape[1] + 1) * classes for c in data.clients]
    m = sum(
        max(1, math.floor(gamma * min(dims[i], dims[j]))) * (dims[i] + dims[j])
        for i in range(6)
        for j in range(i + 1, 6)
    )
    assert s["flops_sheaf"] == 2 * m * ((1 + rounds) + rounds + rounds)  # compact Algorithm 1
    assert s["flops"] == s["flops_local"] + s["flops_sheaf"] > s["flops_sheaf"]


def test_baseline_aggregation_is_counted(tmp_path):
    data = make_dataset([4] * 4)
    cfg = RunConfig(algorithm="fedavg", rounds=2, eval_every=2, batch_size=0)
    s = run(cfg, tmp_path / "f", progress=False, sim=build_simulation(cfg, fed=build_federation(data)))
    d = (4 + 1) * 3
    assert s["flops_aggregation"] == 2 * d * 4 * 2  # the server's weighted average, each round
    assert s["flops"] == s["flops_local"] + s["flops_aggregation"]


def test_peak_rss_restarts_at_reset():
    if not reset_peak_memory("cpu"):
        pytest.skip("this system cannot reset the RSS high-water mark")
    big = np.ones(64 << 20, np.uint8)  # 64 MiB, touched: the peak is at least the RSS with it
    assert peak_memory("cpu")["peak_rss_bytes"] >= _current_rss() > 64 << 20
    del big
    reset_peak_memory("cpu")
    # After a reset the high-water mark is the current RSS (what the allocator kept resident
    # depends on the process's history, so compare with it, not with the earlier peak).
    assert peak_memory("cpu")["peak_rss_bytes"] <= _current_rss() + (8 << 20)


def _current_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_run_reports_its_allocations_and_the_same_flops(tmp_path):
    data = make_dataset([3, 5, 3, 4])
    out = {}
    for device in ("cpu", "cuda"):
        cfg = RunConfig(rounds=3, eval_every=3, graph="complete", batch_size=4, device=device)
        fed = build_federation(data, l2=1e-4, device=device)
        out[device] = run(cfg, tmp_path / device, progress=False, sim=build_simulation(cfg, fed=fed))
    assert out["cpu"]["cuda_max_allocated_bytes"] is None and out["cuda"]["cuda_max_allocated_bytes"] > 0
    for key in ("flops", "flops_local", "flops_sheaf"):
        assert out["cpu"][key] == out["cuda"][key] > 0, key
