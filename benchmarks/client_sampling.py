"""Client sampling: a FedAvg round with 10 of 1,000 clients against one with all 1,000.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/client_sampling.py [--clients 1000]
        [--per-round 10] [--rounds 20]

One synthetic problem (``dataset = synthetic``, a logistic model, 20-60 samples a client), FedAvg
with one local epoch of batch 10; two simulations built on it, ``clients_per_round = null`` (every
client) and ``clients_per_round = 10``, their rounds timed in turn (one untimed round each first),
in the same process. Prints one JSON object: the median wall seconds of a round of each and their
ratio (sampled / all), and the transmitted bits of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import sheaf_fmtl  # noqa: F401 - registers the algorithms before a config is read
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    keys = {
        "dataset": "synthetic",
        "clients": args.clients,
        "algorithm": "fedavg",
        "local_epochs": 1,
        "batch_size": 10,
        "data": {"min_samples": 20, "max_samples": 60},
    }
    sims = {
        "all": build_simulation(RunConfig(**keys)),
        "sampled": build_simulation(RunConfig(**keys, clients_per_round=args.per_round)),
    }
    times: dict[str, list[float]] = {name: [] for name in sims}
    for sim in sims.values():
        sim.step()  # untimed: first-call costs
    for _ in range(args.rounds):
        for name, sim in sims.items():
            start = time.perf_counter()
            sim.step()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        json.dumps(
            {
                "clients": args.clients,
                "clients_per_round": args.per_round,
                "rounds_timed": args.rounds,
                "s_per_round_all": round(median["all"], 5),
                "s_per_round_sampled": round(median["sampled"], 5),
                "ratio": round(median["sampled"] / median["all"], 4),
                "bits_all": sims["all"].transport.bits,
                "bits_sampled": sims["sampled"].transport.bits,
            }
        )
    )


if __name__ == "__main__":
    main()
