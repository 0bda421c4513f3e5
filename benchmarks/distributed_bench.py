"""Two Gloo ranks against the one-process simulator, measured in the same run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distributed_bench.py [--repeats 2]

Per-round time at ``sheaf-fmtl bench``'s small setting (20 clients, logistic models, 30 features),
and peak RSS per process at a setting whose maps dominate memory (``MAPS``: about 1 GiB of maps).
Each measurement runs in fresh processes (the simulator in one, the ranks in two), alternating,
so both see the same machine; prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

SMALL_ROUNDS, WARMUP = 100, 5


def settings():  # noqa: ANN201 - imported lazily in the worker processes
    from sheaf_fmtl.bench.settings import SMALL

    maps = dataclasses.replace(SMALL, name="maps", clients=24, graph_p=0.35, feature_shape=(150,), gamma=0.6)
    return {"small": SMALL, "maps": maps}


def worker(name: str, rounds: int) -> None:
    """One process: the simulator (no ``RANK`` in the environment) or one rank; prints its numbers."""
    import torch
    import torch.distributed as dist

    from sheaf_fmtl.bench.synthetic import make_dataset
    from sheaf_fmtl.runtime.engine.simulate import build_simulation
    from sheaf_fmtl.runtime.run.launching.rank import join_group
    from sheaf_fmtl.runtime.run.launching.rankenv import rank_world

    torch.set_num_threads(1)
    setting = settings()[name]
    config = setting.config().replace(stability_check=name == "small")
    ranks = rank_world()
    if ranks is not None:
        join_group(config)
    sim = build_simulation(config, rank_world=ranks, dataset=make_dataset(setting))
    for _ in range(WARMUP):
        sim.step()
    sim.finite()
    if ranks is not None:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(rounds):
        sim.step()
    sim.finite()
    seconds = (time.perf_counter() - t0) / rounds
    transport = sim.transport
    out = {
        "rank": -1 if ranks is None else ranks[0],
        "round_ms": 1e3 * seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bits_per_round": transport.bits / (WARMUP + rounds),
        "map_mib": sum(m.numel() * m.element_size() for m in getattr(sim.state, "maps", [])) / 2**20,
        "collectives_per_round": getattr(transport, "collectives", 0) / (WARMUP + rounds),
        "bytes_sent_per_round": getattr(transport, "sent_bytes", 0) / (WARMUP + rounds),
    }
    print(json.dumps(out), flush=True)
    if ranks is not None:
        dist.destroy_process_group()


def launch(name: str, rounds: int, world: int) -> list[dict]:
    """Run the worker as the simulator (``world = 1``) or as ``world`` ranks; their JSON lines."""
    from sheaf_fmtl.runtime.run.launching.spawn import free_port

    argv = [sys.executable, __file__, "--worker", name, "--rounds", str(rounds)]
    base = dict(os.environ, OMP_NUM_THREADS="1")
    if world == 1:
        envs = [{k: v for k, v in base.items() if k not in ("RANK", "WORLD_SIZE")}]
    else:
        port = str(free_port())
        envs = [
            dict(
                base,
                RANK=str(r),
                LOCAL_RANK=str(r),
                WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            for r in range(world)
        ]
    procs = [subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, text=True) for e in envs]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return outs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--rounds", type=int, default=SMALL_ROUNDS)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rounds)
        return
    report: dict = {"small": {"simulator": [], "ranks": []}, "maps": {}}
    for _ in range(args.repeats):  # alternate: both see the same load
        report["small"]["simulator"].append(launch("small", args.rounds, 1)[0])
        report["small"]["ranks"].append(launch("small", args.rounds, 2))
    sim = min(r["round_ms"] for r in report["small"]["simulator"])
    two = min(max(x["round_ms"] for x in run) for run in report["small"]["ranks"])
    report["small"]["ratio_2_ranks_over_simulator"] = two / sim
    report["maps"]["simulator"] = launch("maps", 2, 1)[0]
    report["maps"]["ranks"] = launch("maps", 2, 2)
    report["maps"]["rss_ratio_rank_over_simulator"] = (
        max(r["peak_rss_mib"] for r in report["maps"]["ranks"]) / report["maps"]["simulator"]["peak_rss_mib"]
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
