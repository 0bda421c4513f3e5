"""Cost of a resumable checkpoint: how long a round stalls for one, against a round.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/checkpoint_cost.py [--gamma 0.005] [--out DIR]

Builds the bench's R-MNIST-like problem (``cnn``, 34,826 parameters per client) at a medium size
(20 clients, ``gamma`` 0.005: about 1.4 GiB of maps), then times: plain rounds; the stall of a
checkpoint (the host copy of the state, on the round loop's thread); the background write (torch.save
+ fsync); rounds run while the write is in flight; and a synchronous write for comparison. Prints
one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

from sheaf_fmtl.bench.settings import PAPER
from sheaf_fmtl.bench.synthetic import build
from sheaf_fmtl.metrics.flops import SampleCounter
from sheaf_fmtl.runtime.run.checkpoints.checkpoint import CheckpointWriter, write_checkpoint
from sheaf_fmtl.runtime.run.checkpoints.shard import snapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--gamma", type=float, default=0.005)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="folder the checkpoints go to (default: a temp folder)")
    args = parser.parse_args()
    setting = dataclasses.replace(
        PAPER, name="checkpoint-medium", clients=args.clients, gamma=args.gamma, samples=args.samples
    )
    sim = build(setting)
    counter = SampleCounter(sim.ctx.fed)
    state_bytes = sum(v.numel() * v.element_size() for v in sim.state.maps) + sum(
        t.numel() * t.element_size() for t in sim.state.thetas
    )
    out = Path(args.out or tempfile.mkdtemp(prefix="ckpt-cost-"))
    sim.step()  # warm-up

    def timed_rounds(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            sim.step()
        return (time.perf_counter() - t) / n

    round_s = timed_rounds(args.rounds)
    t = time.perf_counter()
    shard = snapshot(sim, counter)
    stall_s = time.perf_counter() - t
    writer = CheckpointWriter(out)
    t = time.perf_counter()
    writer.save(1, shard, {"rows": []})
    launch_s = time.perf_counter() - t
    t = time.perf_counter()
    rounds_during = 0
    while writer.busy:
        sim.step()
        rounds_during += 1
    during_s = time.perf_counter() - t
    writer.wait()
    background_s = time.perf_counter() - t
    t = time.perf_counter()
    write_checkpoint(out, 2, snapshot(sim, counter), {"rows": []})
    sync_s = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    print(
        json.dumps(
            {
                "state_bytes": state_bytes,
                "round_seconds": round_s,
                "stall_seconds": stall_s + launch_s,
                "background_write_seconds": background_s,
                "rounds_during_write": rounds_during,
                "round_seconds_during_write": during_s / max(1, rounds_during),
                "synchronous_checkpoint_seconds": sync_s,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
