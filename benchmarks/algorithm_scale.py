"""Every algorithm's round against its number of clients: seconds a client-round and peak memory.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/algorithm_scale.py [--sizes 1000,16000]
        [--algorithms sheaf-fmtl,dfedu,...] [--rounds 8]

Each (algorithm, size) runs in a process of its own under the program's heap policy
(:mod:`sheaf_fmtl.heap`; ``SHEAF_FMTL_HEAP=system`` for glibc's): the built-in ``synthetic`` data
with ``bench scale``'s 20-80 samples a client, an Erdos-Renyi graph of mean degree 8, the
algorithm's defaults. Per point: the median of the rounds after the first and the peak resident
memory above the interpreter's; per algorithm: the ratio of its seconds a client-round at the
largest size to the smallest's (1 = linear) and of its peak memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

ALGORITHMS = "sheaf-fmtl,dfedu,dpsgd,local,fedavg,ditto,pfedme,perfedavg"

POINT = r"""
import json, resource, statistics, sys, time
from sheaf_fmtl.heap import keep_freed_pages, run_under_tunables
run_under_tunables()
keep_freed_pages()
from sheaf_fmtl import algorithms  # noqa: F401 - the interpreter's part of the baseline
from sheaf_fmtl.bench.scale_worker import SYNTHETIC_DATA, rss_bytes
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation
algorithm, clients, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = rss_bytes()
config = RunConfig(dataset="synthetic", clients=clients, graph_degree=8, data=SYNTHETIC_DATA,
                   algorithm=algorithm, rounds=rounds)
sim = build_simulation(config)
times = []
for _ in range(rounds):
    t = time.perf_counter()
    sim.step()
    times.append(time.perf_counter() - t)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"round_s": statistics.median(times[1:]), "peak_bytes": peak}))
"""


def point(algorithm: str, clients: int, rounds: int) -> dict[str, float]:
    """One (algorithm, size) in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", POINT, algorithm, str(clients), str(rounds)], capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"{algorithm} at {clients} clients failed: {done.stderr.strip()[-400:]}")
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,16000")
    parser.add_argument("--algorithms", default=ALGORITHMS)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.rounds < 2 or len(sizes) < 2:
        parser.error("--rounds >= 2 and at least two sizes")
    print(f"{'algorithm':<12} {'clients':>8} {'us/client-round':>16} {'peak GB':>8}")
    for algorithm in args.algorithms.split(","):
        points = [point(algorithm, n, args.rounds) for n in sizes]
        for n, p in zip(sizes, points, strict=True):
            print(
                f"{algorithm:<12} {n:>8,} {1e6 * p['round_s'] / n:>16.1f} {p['peak_bytes'] / 1e9:>8.2f}",
                flush=True,
            )
        first, last = points[0], points[-1]
        ratio = (last["round_s"] / sizes[-1]) / (first["round_s"] / sizes[0])
        memory, growth = last["peak_bytes"] / first["peak_bytes"], sizes[-1] / sizes[0]
        print(
            f"{algorithm}: a client-round x{ratio:.2f}, peak memory x{memory:.2f} for x{growth:g} the clients"
        )


if __name__ == "__main__":
    main()
