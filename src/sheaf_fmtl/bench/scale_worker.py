"""One point of ``sheaf-fmtl bench scale``, measured in a process of its own (so its peak memory is
its own): ``python -m sheaf_fmtl.bench.scale_worker '{"problem": ..., "clients": N, ...}'`` prints
one JSON line: start-up seconds (data, graph, models, maps, the round-0 evaluation: what a run does
before its first round), each round's seconds, an evaluation's seconds, the peak resident memory
(under the program's heap policy, :mod:`sheaf_fmtl.heap`),
the interpreter's resident memory before any data, and the floor a run cannot go below (the data
once, the models, the graph, one round's messages)."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: The problems: ``synthetic`` (the built-in dataset, fewer samples a client so 100,000 clients fit
#: in a few GB) and ``school-shaped`` (regression, School's 28 features and 22-251 samples a client).
PROBLEMS = ("synthetic", "school-shaped")
SYNTHETIC_DATA = {"min_samples": 20, "max_samples": 80}


def rss_bytes() -> int:
    """Resident memory now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    except OSError:
        return 0


def peak_rss_bytes() -> int:
    """The process's peak resident memory (``ru_maxrss``, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def school_shaped(clients: int, seed: int) -> Any:
    """Regression clients like School's: 28 standardised features, 22-251 samples, targets from one
    of four related linear models plus a client's own part and noise (the paper's 75/25 split)."""
    from ..data.base import RawClient, RawFederated
    from ..data.protocol import apply_protocol

    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((4, 28)).astype(np.float32)
    counts = rng.integers(22, 252, size=clients)
    raw = []
    for i, n in enumerate(counts.tolist()):
        x = rng.standard_normal((n, 28), dtype=np.float32)
        w = shared[i % 4] + 0.3 * rng.standard_normal(28, dtype=np.float32)
        raw.append(RawClient(x, (x @ w + rng.standard_normal(n, dtype=np.float32)).astype(np.float32)))
    return apply_protocol(RawFederated("school-shaped", "regression", 0, tuple(raw)), seed)


def data_bytes(dataset: Any) -> int:
    """The data's own bytes, every split once (unpadded)."""
    return sum(
        a.nbytes for c in dataset.clients for a in (c.x_train, c.y_train, c.x_test, c.y_test) if a is not None
    )


def measure(problem: str, clients: int, rounds: int, degree: float, seed: int = 0) -> dict[str, Any]:
    """One point (see the module docstring)."""
    import torch

    from .. import algorithms  # noqa: F401  (imported before the baseline: the interpreter's part)
    from ..config import RunConfig
    from ..runtime.engine.simulate import build_simulation, load_dataset

    torch.manual_seed(seed)
    baseline = rss_bytes()
    t0 = time.perf_counter()
    if problem == "synthetic":
        config = RunConfig(dataset="synthetic", clients=clients, graph_degree=degree, data=SYNTHETIC_DATA)
        dataset = load_dataset(config)
    else:
        config = RunConfig(dataset="synthetic", clients=clients, graph_degree=degree)
        dataset = school_shaped(clients, seed)
    t_data = time.perf_counter() - t0
    sim = build_simulation(config.replace(rounds=rounds), dataset=dataset)
    sim.evaluate()
    startup = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        sim.step()
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    final = sim.evaluate()
    evaluation = time.perf_counter() - t
    graph = sim.ctx.graph
    models = sum(t.numel() * t.element_size() for t in sim.state.thetas)
    messages = sim.transmitted_bits() // 8 // rounds
    graph_bytes = (
        sum(int(a.nbytes) for a in (graph.edges, graph.src, graph.dst, graph.rev)) + 8 * graph.num_edges
    )
    floor = {"data": data_bytes(dataset), "models": models, "graph": graph_bytes, "messages": messages}
    return {
        "problem": problem,
        "clients": clients,
        "edges": graph.num_edges,
        "joined_edges": graph.joined_edges,
        "model_dims": sorted({int(d) for d in sim.ctx.fed.node_dims()}),
        "maps": sim.config.maps,
        "rounds": rounds,
        "data_seconds": t_data,
        "startup_seconds": startup,
        "round_seconds": times,
        "evaluation_seconds": evaluation,
        "metric": float(final["test_metric"]),
        "interpreter_rss_bytes": baseline,
        "peak_rss_bytes": peak_rss_bytes(),
        "floor_bytes": floor,
    }


def main(argv: list[str]) -> int:
    from ..heap import applied_policy, run_under_tunables

    run_under_tunables()  # as the program starts (sheaf_fmtl.heap)
    args = json.loads(argv[0])
    heap = applied_policy()  # as the program runs (sheaf_fmtl.heap)
    print(json.dumps({**measure(**args), "heap": heap}), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a subprocess by .scale
    sys.exit(main(sys.argv[1:]))
