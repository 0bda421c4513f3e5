"""BatchNorm's cost: a round and an evaluation of ``model = cnn-bn`` against ``model = cnn``.

    OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/batchnorm_round.py [--clients 10]
        [--rounds 3] [--algorithm sheaf-fmtl] [--device cpu]

The bench's generated 1x28x28 images (``sheaf-fmtl bench``'s ``paper`` setting, 1,500 samples a
client before the paper's split, Erdos-Renyi p = 0.15) under the algorithm's defaults (one local
epoch of batch 32). Three simulations are built in this process: ``cnn``, ``cnn-bn`` (the fused
kernel, BatchNorm on its grouped layout) and ``cnn-bn`` on the general path (``torch.func``
``vmap`` over the clients, what BatchNorm took before, and the fused path's oracle); their rounds
are timed in turn (one untimed round each first), then two evaluations each. Prints one JSON
object: the median seconds of a round and of an evaluation of each and their ratios to ``cnn``.

``--memory`` instead runs each in a process of its own (one round and an evaluation) and prints
their peak resident memory (``ru_maxrss``) and its ratio to ``cnn``'s (on CUDA: the device's peak
allocated memory, ``torch.cuda.max_memory_allocated``). ``--device cuda`` times with the device's
queue drained before and after each call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
from typing import Any

import torch

import sheaf_fmtl  # noqa: F401 - registers the algorithms before a config is read
from sheaf_fmtl.bench.settings import PAPER
from sheaf_fmtl.bench.synthetic import make_dataset
from sheaf_fmtl.bench.timing import timed
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation

#: name -> (model, CNN kernel): "im2col" sends a BatchNorm cohort to the ``vmap`` path.
RUNS = {"cnn": ("cnn", "fused"), "cnn-bn": ("cnn-bn", "fused"), "cnn-bn-vmap": ("cnn-bn", "im2col")}


def _build(model: str, kernel: str, clients: int, algorithm: str, device: str) -> Simulation[Any]:
    setting = dataclasses.replace(PAPER, model=model, clients=clients)
    config = RunConfig(
        algorithm=algorithm, dataset=f"bench-{setting.name}", model=model, clients=clients,
        graph="erdos-renyi", graph_p=setting.graph_p, batch_size=setting.batch_size, device=device,
    )  # fmt: skip
    fed = build_federation(make_dataset(setting), model, l2=config.l2, device=device)
    for cohort in fed.cohorts:
        cohort.cnn_kernel = kernel
    return build_simulation(config, fed=fed)


def _median_seconds(call: Any, times: int, device: str) -> float:
    return statistics.median(timed(call, device) for _ in range(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--algorithm", default="sheaf-fmtl")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--memory", action="store_true", help="peak memory, each in its own process")
    parser.add_argument("--only", choices=list(RUNS), help=argparse.SUPPRESS)  # one --memory process
    args = parser.parse_args()
    if args.memory:
        _memory(args)
        return
    if args.only:
        sim = _build(*RUNS[args.only], args.clients, args.algorithm, args.device)
        sim.step()
        sim.evaluate()
        if args.device.startswith("cuda"):
            print(torch.cuda.max_memory_allocated())
        else:
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # KiB on Linux
        return
    sims = {name: _build(*spec, args.clients, args.algorithm, args.device) for name, spec in RUNS.items()}
    for sim in sims.values():
        sim.step()  # untimed: first-call costs
    rounds: dict[str, list[float]] = {name: [] for name in sims}
    for _ in range(args.rounds):  # in turn, so that a change in the machine's load hits each
        for name, sim in sims.items():
            rounds[name].append(_median_seconds(sim.step, 1, args.device))
    evaluation = {name: _median_seconds(sim.evaluate, 2, args.device) for name, sim in sims.items()}
    per_round = {name: statistics.median(t) for name, t in rounds.items()}
    report: dict[str, Any] = {
        "algorithm": args.algorithm,
        "clients": args.clients,
        "device": args.device,
        "rounds_timed": args.rounds,
    }
    for name in sims:
        report[f"s_per_round_{name}"] = round(per_round[name], 4)
        report[f"s_evaluation_{name}"] = round(evaluation[name], 4)
        if name != "cnn":
            report[f"round_ratio_{name}"] = round(per_round[name] / per_round["cnn"], 3)
            report[f"evaluation_ratio_{name}"] = round(evaluation[name] / evaluation["cnn"], 3)
    print(json.dumps(report))


def _memory(args: argparse.Namespace) -> None:
    peak = {}
    for name in RUNS:
        command = [sys.executable, __file__, "--only", name, "--clients", str(args.clients)]
        command += ["--algorithm", args.algorithm, "--device", args.device]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name}: {done.stderr.strip().splitlines()[-1]}")
        peak[name] = int(done.stdout.split()[-1])
    report: dict[str, Any] = {"algorithm": args.algorithm, "clients": args.clients, "device": args.device}
    for name, value in peak.items():
        report[f"peak_gb_{name}"] = round(value / 1e9, 3)
        if name != "cnn":
            report[f"memory_ratio_{name}"] = round(value / peak["cnn"], 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
