"""The run split over Gloo processes on the loopback (``processes = K``) against the one-process run:
final thetas, maps, per-client metrics and every metrics row agree (allclose), transmitted bits
exactly; exchange plans against an in-process gather; a killed rank ends the others with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.distributed import make_plan
from sheaf_fmtl.runtime.engine.shard import Shard, community, contiguous, placement
from sheaf_fmtl.runtime.run.launching.launch import spawn
from sheaf_fmtl.runtime.run.loop import execute
from sheaf_fmtl.sheaf.graph import make_graph
from sheaf_fmtl.sheaf.layout import build_layout

TINY = {
    "clients": 7,
    "rounds": 4,
    "eval_every": 2,
    "graph_p": 0.5,
    "data.min_samples": 20,
    "data.max_samples": 40,
}


def _by_half_edge(final: dict[str, Any]) -> list[torch.Tensor]:
    """The maps of a ``checkpoint.pt`` payload in graph half-edge order, whichever runtime wrote it."""
    if "maps_by_half_edge" in final:
        return final["maps_by_half_edge"]
    pairs = [
        (int(h), m[k])
        for hs, m in zip(final["bucket_half_edges"], final["maps"], strict=True)
        for k, h in enumerate(hs)
    ]
    return [m for _, m in sorted(pairs, key=lambda p: p[0])]


def _compare(tmp_path: Path, settings: dict[str, Any], processes: int) -> None:
    """The same config on one process (in memory) and on ``processes`` ranks (the CLI)."""
    config = RunConfig(**{k: v for k, v in settings.items() if not k.startswith("data.")}).replace(
        data={k[5:]: v for k, v in settings.items() if k.startswith("data.")}
    )
    one = execute(config, None)
    summary = spawn(config.replace(processes=processes), tmp_path / "ranks", progress=False, overwrite=False)
    assert summary == json.loads((tmp_path / "ranks" / "summary.json").read_text())
    final = torch.load(tmp_path / "ranks" / "checkpoint.pt")
    assert summary["transmitted_bits"] == one.summary["transmitted_bits"] > 0
    for key in ("dropped_messages", "rejected_messages"):
        assert summary[key] == one.summary[key], key
    for key in ("final", "flops", "flops_local", "flops_sheaf", "flops_aggregation"):
        assert summary[key] == pytest.approx(one.summary[key], rel=1e-6), key
    np.testing.assert_allclose(summary["per_client"], one.summary["per_client"], rtol=1e-5, atol=1e-6)
    for a, b in zip(one.final["thetas"], final["thetas"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    if "maps" in one.final:
        for a, b in zip(_by_half_edge(one.final), _by_half_edge(final), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(one.final["map_norms"], final["map_norms"], rtol=1e-5, atol=1e-6)
    lines = (tmp_path / "ranks" / "metrics.csv").read_text().splitlines()[1:]
    assert len(lines) == len(one.rows)
    for row, line in zip(one.rows, lines, strict=True):
        cells = line.split(",")
        assert int(cells[0]) == row["round"] and int(cells[5]) == row["transmitted_bits"]
        assert float(cells[3]) == pytest.approx(row["objective"], rel=1e-5)


def test_two_processes_match_one_sheaf_fmtl_heterogeneous_compact(tmp_path: Path) -> None:
    """Default suite: Sheaf-FMTL, compact messages, models of different sizes, 2 Gloo ranks."""
    settings = {
        "algorithm": "sheaf-fmtl",
        "maps": "learned",
        "local_epochs": 0,
        "dataset": "synthetic-hetero",
    }
    _compare(tmp_path, {**settings, **TINY}, 2)


REDRAWN = {"algorithm": "sheaf-fmtl", "dataset": "synthetic", "maps": "redrawn", "gamma": 0.2}


@pytest.mark.slow
def test_three_processes_match_one_redrawn_maps_with_estimates_and_faults(tmp_path: Path) -> None:
    """Default suite: maps redrawn each round from (seed, edge, round) are the same whichever rank
    draws them; the copies of the neighbours are sharded with their half-edges."""
    settings = {**REDRAWN, "estimates": True, "link_drop_prob": 0.2, "drop_prob": 0.1, **TINY}
    _compare(tmp_path, settings, 3)


@pytest.mark.slow
def test_three_processes_match_one_compressed_gossip_with_faults(tmp_path: Path) -> None:
    """Default suite: CHOCO's copies are sharded with their half-edges, each message decoded with its
    sender's global id (seeded coordinates drawn again on the receiving rank), the encoded bytes
    moved as they are."""
    settings = {
        "algorithm": "dfedu",
        "dataset": "synthetic",
        "compressor": "rand-k-seeded",
        "compression": 0.05,
        "link_drop_prob": 0.2,
        "drop_prob": 0.1,
        **TINY,
    }
    _compare(tmp_path, settings, 3)


def three_cnns(tmp_path: Path) -> dict[str, Any]:
    """Six clients of ``cnn-small, cnn-medium, cnn-large`` on small random images (``lam = 0.5``)."""
    rng = np.random.default_rng(0)
    images = {"num_clients": np.int64(6)}
    for i in range(6):
        images[f"x_{i}"] = rng.normal(size=(24, 1, 12, 12)).astype(np.float32)
        images[f"y_{i}"] = rng.integers(0, 3, 24)
    np.savez(tmp_path / "images.npz", **images)
    return {
        "dataset": f"file:{tmp_path / 'images.npz'}",
        "model": "cnn-small,cnn-medium,cnn-large",
        "lam": 0.5,
        "batch_size": 8,
        **{k: v for k, v in TINY.items() if k != "clients" and not k.startswith("data.")},
    }


@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_three_processes_match_one_aligned_maps_between_three_cnns(tmp_path: Path) -> None:
    """Default suite: a rank builds the supports of edges to architectures it does not hold, and
    the shared slices start equal from the same draws whichever rank holds which cohort."""
    settings = {**three_cnns(tmp_path), "maps": "aligned"}
    _compare(tmp_path, settings, 3)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize(
    "settings",
    [
        {
            "algorithm": "sheaf-fmtl",
            "maps": "learned",
            "dataset": "synthetic-hetero",
            "message_mode": "literal",
        },
        {
            "algorithm": "sheaf-fmtl",
            "maps": "learned",
            "dataset": "synthetic-hetero",
            "local_epochs": 1,
            "placement": "community",
        },
        {"algorithm": "dfedu", "dataset": "synthetic"},
        {"algorithm": "dpsgd", "dataset": "synthetic", "local_epochs": 1},
        {"algorithm": "fedavg", "dataset": "synthetic"},
        {
            "algorithm": "sheaf-fmtl",
            "maps": "learned",
            "dataset": "synthetic-hetero",
            "drop_prob": 0.2,
            "link_drop_prob": 0.2,
        },
        {"algorithm": "fedavg", "dataset": "synthetic", "drop_prob": 0.3},
        {**REDRAWN, "map_kind": "orthonormal", "local_epochs": 1},
        {"algorithm": "dfedu", "dataset": "synthetic", "compressor": "top-k", "compression": 0.02},
        {"algorithm": "dpsgd", "dataset": "synthetic", "compressor": "qsgd", "quantization_bits": 3},
        {"algorithm": "dpsgd", "dataset": "synthetic", "compressor": "powergossip", "rank": 2},
        {
            "algorithm": "sheaf-fmtl",
            "dataset": "synthetic-hetero",
            "maps": "features",
            "placement": "community",
        },
        {"algorithm": "fedavg-ft", "dataset": "synthetic", "finetune_epochs": 2},
        {"algorithm": "dpsgd-ft", "dataset": "synthetic", "local_epochs": 1},
        {"algorithm": "partial", "dataset": "synthetic", "model": "tests._baselines_problems:mlp"},
    ],
    ids=[
        "sheaf-literal",
        "sheaf-epochs-community",
        "dfedu",
        "dpsgd",
        "fedavg",
        "sheaf-drops",
        "fedavg-drops",
        "redrawn-orthonormal",
        "dfedu-top-k",
        "dpsgd-qsgd",
        "dpsgd-powergossip",
        "features",
        "fedavg-ft",
        "dpsgd-ft",
        "partial",
    ],
)
def test_k_processes_match_one(tmp_path: Path, settings: dict[str, Any], processes: int) -> None:
    _compare(tmp_path, {**settings, **TINY}, processes)


@pytest.mark.slow
def test_a_killed_rank_ends_the_others_with_one_line_naming_it(tmp_path: Path) -> None:
    """SIGKILL rank 1 of a 2-process run mid-way: the command ends within ``timeout_s`` (+ start-up)
    with one line naming rank 1 and the round rank 0 had reached, and no traceback."""
    settings = {**TINY, "rounds": 100000, "eval_every": 1, "processes": 2, "timeout_s": 5}
    pairs = [f"{k}={v}" for k, v in settings.items()]
    argv = [
        sys.executable,
        "-m",
        "sheaf_fmtl",
        "run",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
        "--set",
        *pairs,
    ]
    parent = subprocess.Popen(
        argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    metrics = tmp_path / "run" / "metrics.csv"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 3):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    rank1 = _child_with_rank(parent.pid, 1)
    killed = time.monotonic()
    os.kill(rank1, signal.SIGKILL)
    _, err = parent.communicate(timeout=60)
    assert time.monotonic() - killed < 5 + 20
    assert parent.returncode != 0
    lines = [s for s in err.splitlines() if s.startswith("sheaf-fmtl: error:")]
    assert len(lines) == 1 and "rank 1 ended with signal SIGKILL" in lines[0], err
    assert "rank 0 of 2: lost contact with the group in round" in lines[0] and "Traceback" not in err


def _child_with_rank(parent: int, rank: int) -> int:
    """The pid of ``parent``'s child process started with ``RANK=rank``."""
    for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no child with RANK={rank}")


def test_placements_cover_every_client_and_community_cuts_fewer_edges() -> None:
    graph = make_graph("watts-strogatz", 24, k=4, p=0.05, seed=0)
    blocks = contiguous(24, 3)
    assert np.bincount(blocks).tolist() == [8, 8, 8] and (np.diff(blocks) >= 0).all()
    owner = community(graph, 3, seed=0)
    assert set(owner.tolist()) == {0, 1, 2}
    scattered = np.arange(24) % 3  # round-robin: most ring edges cross ranks
    assert Shard(0, 3, owner).cut_edges(graph) < Shard(0, 3, scattered).cut_edges(graph)
    assert Shard(1, 3, owner).clients.tolist() == np.flatnonzero(owner == 1).tolist()
    with pytest.raises(ValueError, match="processes"):
        placement(graph, 25)


def test_exchange_plans_of_three_shards_reassemble_the_in_process_exchange() -> None:
    """Each rank's packed buffers, split and delivered by hand as ``all_to_all_single`` would,
    gathered by its plan, equal what one process receives at the same half-edges."""
    graph = make_graph("erdos-renyi", 9, p=0.5, seed=3)
    dims, coh = np.array([4, 6, 4, 6, 4, 6, 4, 6, 4]), np.array([0, 1, 0, 1, 0, 1, 0, 1, 0])
    whole = build_layout(graph, dims, coh, 0.5).messages
    payload = torch.arange(whole.total, dtype=torch.float64)  # element e of half-edge h: distinct values
    expected = payload.index_select(0, whole.exchange_index())
    want = {
        int(h): expected[whole.offsets[q] : whole.offsets[q] + whole.rev_sizes[q]]
        for q, h in enumerate(whole.half_edges)
    }
    sent = {
        int(h): payload[whole.offsets[q] : whole.offsets[q] + whole.sizes[q]]
        for q, h in enumerate(whole.half_edges)
    }
    owner = np.array([0, 0, 1, 1, 1, 2, 2, 0, 2])
    layouts, plans, packed = [], [], []
    for r in range(3):
        local = np.where(owner == r, coh, -1)
        lay = build_layout(graph, dims, local, 0.5).messages
        data = torch.cat([sent[int(h)] for h in lay.half_edges])  # what rank r sends, in its buffer order
        plan = make_plan(lay, graph, Shard(r, 3, owner), torch.device("cpu"))
        layouts.append((lay, data))
        plans.append(plan)
        packed.append(list(torch.split(data.index_select(0, plan.send), plan.send_splits)))
    for r, ((lay, data), plan) in enumerate(zip(layouts, plans, strict=True)):
        received = torch.cat([packed[p][r] for p in range(3)])  # all_to_all: chunk r of every peer
        assert len(received) == sum(plan.recv_splits)
        got = torch.cat([data, received]).index_select(0, plan.gather)
        for q, h in enumerate(lay.half_edges):
            start = int(np.concatenate([[0], np.cumsum(lay.rev_sizes)])[q])
            torch.testing.assert_close(
                got[start : start + int(lay.rev_sizes[q])], want[int(h)], rtol=0, atol=0
            )


@pytest.mark.slow
def test_sigterm_stops_every_rank_after_the_same_round(tmp_path: Path) -> None:
    """SIGTERM to ``processes=2``: forwarded to both ranks, which agree on the round to stop after;
    exit status 143 and an interrupted summary whose last metrics row is that round."""
    settings = {**TINY, "rounds": 100000, "eval_every": 5, "processes": 2}
    pairs = [f"{k}={v}" for k, v in settings.items()]
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--out", str(out), "--set", *pairs]
    parent = subprocess.Popen(
        argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    deadline = time.monotonic() + 120
    while not ((out / "metrics.csv").exists() and len((out / "metrics.csv").read_text().splitlines()) > 2):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.1)
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 143, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM"
    last = (out / "metrics.csv").read_text().splitlines()[-1].split(",")
    assert int(last[0]) == summary["rounds_done"] and "Traceback" not in err
