"""A ``maps=redrawn`` round against a dFedU round of the same problem, side by side in one process.

    OMP_NUM_THREADS=1 SHEAF_FMTL_DATA=../shared/data .venv/bin/python benchmarks/coupling_round_bench.py \
        [--dataset school] [--rounds 100] [--blocks 10] [--variants redrawn,redrawn-est,...]

Builds one simulation per variant from the same config (the dataset's default graph, Erdos-Renyi
p = 0.2, one local epoch of batch-32 SGD a round, gamma 0.1, the same seed), then times ``sim.step()``
in alternating blocks (``--blocks`` blocks of ``--rounds / --blocks`` rounds per variant, in turn,
so that the load of a shared machine falls on all alike). Prints each variant's median seconds per
round over the blocks and its ratio to dFedU's (the target for ``redrawn``: at most 1.2), then one
JSON line with every number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from sheaf_fmtl.api import resolve_config
from sheaf_fmtl.runtime.engine.simulate import build_simulation

VARIANTS = {
    "dfedu": {"algorithm": "dfedu", "lam": 0.1},
    "redrawn": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "lam": 1.0},
    "redrawn-est": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "estimates": True, "lam": 0.1},
    "redrawn-orthonormal": {
        "algorithm": "sheaf-fmtl",
        "maps": "redrawn",
        "map_kind": "orthonormal",
        "lam": 1.0,
    },
    "redrawn-gaussian": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "map_kind": "gaussian", "lam": 1.0},
    "learned": {"algorithm": "sheaf-fmtl", "maps": "learned", "lam": 0.01},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="school")
    parser.add_argument("--rounds", type=int, default=100, help="timed rounds per variant")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--variants", default="redrawn,redrawn-est", help=f"from {','.join(VARIANTS)}")
    parser.add_argument("--gamma", type=float, default=0.1)
    args = parser.parse_args()
    names = ["dfedu"] + [v for v in args.variants.split(",") if v and v != "dfedu"]
    base = dict(
        dataset=args.dataset,
        graph="erdos-renyi",
        graph_p=0.2,
        local_epochs=1,
        batch_size=32,
        gamma=args.gamma,
        alpha=0.01,
        rounds=10**6,
        seed=0,
        save_maps=False,
        checkpoint_every=0,
    )
    sims = {n: build_simulation(resolve_config(None, **{**base, **VARIANTS[n]})) for n in names}
    for sim in sims.values():  # warm-up
        for _ in range(3):
            sim.step()
    per_block = max(1, args.rounds // args.blocks)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.blocks):
        for n, sim in sims.items():
            t = time.perf_counter()
            for _ in range(per_block):
                sim.step()
            times[n].append((time.perf_counter() - t) / per_block)
    med = {n: statistics.median(v) for n, v in times.items()}
    print(
        f"{args.dataset}, {per_block * args.blocks} rounds each in {args.blocks} alternating blocks, "
        f"torch threads {torch.get_num_threads()}"
    )
    for n in names:
        print(f"  {n:22s} {med[n] * 1e3:8.2f} ms/round   ratio to dFedU {med[n] / med['dfedu']:.3f}")
    print(
        json.dumps(
            {
                "dataset": args.dataset,
                "gamma": args.gamma,
                "rounds_per_variant": per_block * args.blocks,
                "median_s_per_round": med,
                "ratio_to_dfedu": {n: med[n] / med["dfedu"] for n in names},
                "blocks_s_per_round": times,
            }
        )
    )


if __name__ == "__main__":
    main()
