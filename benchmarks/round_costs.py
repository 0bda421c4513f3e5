"""Where a large round's time goes: three kernels against their alternative, and the edge-weight
probe rounds against plain ones.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/round_costs.py [--clients 30000] [--probe-clients 10000]

Kernels (the fastest of 5 calls each, ratios in the same run), at ``--clients`` clients of the
``bench scale`` synthetic shape (610 parameters, mean degree 8, ``gamma = 0.3``, 61 padded samples
of 60 features, batch 32):
- a cohort's mini-batch gather (``index_select`` of ``[C x 32]`` rows) into a fresh tensor against
  one into a kept buffer (``out=``): the price of fresh pages (:mod:`sheaf_fmtl.heap`);
- a round's messages ``theta.view(-1)[positions]`` by advanced indexing against ``index_select``;
- the per-sample cross-entropy of ``[4096 x 64, 10]`` logits: ``cross_entropy(reduction="none")``
  against ``logsumexp`` minus the label's logit.
Probe rounds: the default Sheaf-FMTL on ``--probe-clients`` clients under the program's heap
policy, 11 rounds; the median of the plain rounds against the rounds that probe the edge weights
(0, 5, 10); then an evaluation's parts (test metric, train loss, sheaf energy), the fastest of 2.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def fastest(call: Callable[[], object], times: int = 5) -> float:
    call()
    best = float("inf")
    for _ in range(times):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best


def kernels(clients: int) -> None:
    torch.manual_seed(0)
    n_max, features, batch, d, degree, d_e = 61, 60, 32, 610, 8, 183
    x = torch.randn(clients * n_max, features)
    rows = (
        torch.rand(clients, n_max).argsort(1)[:, :batch] + n_max * torch.arange(clients)[:, None]
    ).reshape(-1)
    kept = torch.empty(len(rows), features)
    fresh = fastest(lambda: x.index_select(0, rows))
    reused = fastest(lambda: torch.index_select(x, 0, rows, out=kept))
    print(
        f"mini-batch gather [{clients:,} x {batch}, {features}]: fresh {1e3 * fresh:.1f} ms, "
        f"kept buffer {1e3 * reused:.1f} ms ({fresh / reused:.1f}x)"
    )
    theta = torch.randn(clients, d)
    half_edges = clients * degree
    src = torch.randint(0, clients, (half_edges,))
    pos = (src[:, None] * d + torch.randint(0, d, (half_edges, d_e))).to(torch.int32)
    advanced = fastest(lambda: theta.reshape(-1)[pos])
    selected = fastest(lambda: theta.reshape(-1).index_select(0, pos.reshape(-1)).view(pos.shape))
    assert torch.equal(
        theta.reshape(-1)[pos], theta.reshape(-1).index_select(0, pos.reshape(-1)).view(pos.shape)
    )
    print(
        f"messages [{half_edges:,} x {d_e}]: advanced indexing {1e3 * advanced:.1f} ms, "
        f"index_select {1e3 * selected:.1f} ms ({advanced / selected:.1f}x)"
    )
    logits, labels = torch.randn(4096 * 64, 10), torch.randint(0, 10, (4096 * 64,))
    library = fastest(lambda: F.cross_entropy(logits, labels, reduction="none"))
    ours = fastest(lambda: torch.logsumexp(logits, -1) - logits.gather(-1, labels[:, None]).squeeze(-1))
    print(
        f"per-sample cross-entropy [{len(labels):,}, 10]: cross_entropy {1e3 * library:.1f} ms, "
        f"logsumexp - logit {1e3 * ours:.1f} ms ({library / ours:.1f}x)"
    )


def probe_rounds(clients: int) -> None:
    from sheaf_fmtl.heap import keep_freed_pages

    keep_freed_pages()
    import sheaf_fmtl  # noqa: F401 - registers the algorithms
    from sheaf_fmtl.bench.scale_worker import SYNTHETIC_DATA
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.runtime.engine.simulate import build_simulation

    config = RunConfig(dataset="synthetic", clients=clients, graph_degree=8, data=SYNTHETIC_DATA, rounds=12)
    sim = build_simulation(config)
    seconds = []
    for _ in range(11):
        t = time.perf_counter()
        sim.step()
        seconds.append(time.perf_counter() - t)
    plain = statistics.median(s for r, s in enumerate(seconds) if r % 5)
    probes = [seconds[r] for r in (0, 5, 10)]
    print(
        f"Sheaf-FMTL at {clients:,} clients: plain round {plain:.2f} s (median), probe rounds "
        f"{', '.join(f'{p:.2f}' for p in probes)} s (rounds 0, 5, 10)"
    )
    cohort, theta = sim.ctx.fed.cohorts[0], sim.state.thetas[0]
    parts = {
        "test metric": lambda: cohort.test_metric(theta),
        "train loss": lambda: cohort.train_loss(theta),
        "sheaf energy": lambda: sim.algorithm.penalty(sim.state, sim.ctx),
    }
    with torch.no_grad():
        took = {name: fastest(call, times=2) for name, call in parts.items()}
    print("an evaluation's parts: " + ", ".join(f"{name} {s:.2f} s" for name, s in took.items()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=30000, help="clients of the kernels' shapes")
    parser.add_argument(
        "--probe-clients", type=int, default=10000, help="clients of the probe rounds (0: skip)"
    )
    args = parser.parse_args()
    kernels(args.clients)
    if args.probe_clients > 0:
        probe_rounds(args.probe_clients)


if __name__ == "__main__":
    main()
