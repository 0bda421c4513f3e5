"""Seconds per School round (Sheaf-FMTL with learned maps, dFedU) of this checkout, and optionally of
an older source tree, timed interleaved under the same machine load; prints the ratio.

One worker process per (source tree, algorithm) builds the run (School, 139 clients, ER p=0.2,
``local_epochs=1``, ``batch_size=32``) and, on each request, times a block of rounds as the run loop
takes them (``sim.step()`` then ``sim.finite()``). Blocks of the workers alternate (A, B, A, B, ...),
so a load change hits both; the ratio is the median of the per-pair ratios.

    SHEAF_FMTL_DATA=/work/shared/data .venv/bin/python benchmarks/school_round_bench.py \
        [--old /path/to/older/checkout] [--pairs 9] [--rounds 5] [--algorithms sheaf-fmtl,dfedu]

``--old`` is a checkout (its ``src`` is put first on ``PYTHONPATH``); without it, this checkout is
timed against itself (a check that the ratio reads 1.0 under the current load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CONFIG = {
    "maps": "learned",  # Algorithm 1 (the default maps=auto would pick redrawn maps)
    "dataset": "school",
    "graph": "erdos-renyi",
    "graph_p": 0.2,
    "local_epochs": 1,
    "batch_size": 32,
    "lam": 0.01,
    "seed": 0,
    "eval_every": 1000,
}


def worker(algorithm: str, warmup: int, threads: int) -> None:
    """Build the run, answer each line ``n`` on stdin with ``[wall, cpu]`` seconds of ``n`` rounds."""
    import torch

    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.runtime.engine.simulate import build_simulation

    if threads > 0:
        torch.set_num_threads(threads)
    sim = build_simulation(RunConfig(algorithm=algorithm, **CONFIG))  # type: ignore[arg-type]
    for _ in range(warmup):
        sim.step()
        sim.finite()
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            sim.step()
            if not sim.finite():
                raise RuntimeError("diverged")
        print(json.dumps([time.perf_counter() - t0, time.process_time() - c0]), flush=True)


def start(src: Path, algorithm: str, warmup: int, threads: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        algorithm,
        "--warmup",
        str(warmup),
        "--threads",
        str(threads),
    ]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"worker for {src} ({algorithm}) failed to start")
    return proc


def block(proc: subprocess.Popen[str], rounds: int) -> tuple[float, float]:
    """(wall, cpu) seconds per round of one block."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{rounds}\n")
    proc.stdin.flush()
    wall, cpu = json.loads(proc.stdout.readline())
    return wall / rounds, cpu / rounds


def compare(
    new: Path, old: Path, algorithm: str, pairs: int, rounds: int, warmup: int, threads: int
) -> dict[str, dict[str, float]]:
    """Medians over interleaved pairs of blocks: seconds per round of each tree and new/old ratios,
    by wall clock and by the worker's CPU time (less sensitive to other jobs on a loaded machine)."""
    a, b = start(new, algorithm, warmup, threads), start(old, algorithm, warmup, threads)
    got: dict[str, list[tuple[float, float]]] = {"new": [], "old": []}
    try:
        for k in range(pairs):
            order = [("new", a), ("old", b)] if k % 2 == 0 else [("old", b), ("new", a)]  # alternate
            for name, proc in order:
                got[name].append(block(proc, rounds))
    finally:
        for p in (a, b):
            if p.stdin is not None:
                p.stdin.close()
            p.wait()
    out = {}
    for i, clock in enumerate(("wall", "cpu")):
        ratios = [n[i] / o[i] for n, o in zip(got["new"], got["old"], strict=True)]
        out[clock] = {
            "new_s": statistics.median(n[i] for n in got["new"]),
            "old_s": statistics.median(o[i] for o in got["old"]),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", type=Path, default=None, help="an older checkout to time against")
    parser.add_argument("--new", type=Path, default=HERE, help="the checkout to time (default: this one)")
    parser.add_argument("--pairs", type=int, default=9, help="interleaved (new, old) blocks")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per block")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds per worker")
    parser.add_argument("--algorithms", default="sheaf-fmtl,dfedu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per worker (0: torch's default)"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.warmup, args.threads)
        return
    new = args.new / "src"
    old = (args.old / "src") if args.old is not None else new
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(
        f"School, 139 clients, ER p=0.2, local_epochs=1, batch 32; {args.pairs} pairs x {args.rounds} "
        f"rounds, {args.threads or 'default'} torch thread(s) per worker"
    )
    print(f"new: {new}\nold: {old}\nload average at start: {load:.1f} on {os.cpu_count()} CPUs")
    for algorithm in args.algorithms.split(","):
        result = compare(new, old, algorithm, args.pairs, args.rounds, args.warmup, args.threads)
        for clock, r in result.items():
            print(
                f"{algorithm} ({clock}): new {r['new_s'] * 1e3:.1f} ms/round, old {r['old_s'] * 1e3:.1f} "
                f"ms/round, new/old {r['ratio']:.3f} (pairs {r['ratio_min']:.3f}..{r['ratio_max']:.3f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
