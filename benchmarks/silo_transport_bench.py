"""Wall time of the authenticated silo transport against Gloo, measured in the same run.

    SHEAF_FMTL_DATA=... OMP_NUM_THREADS=1 .venv/bin/python benchmarks/silo_transport_bench.py [--repeats 3]

Three silos on this machine's loopback train R-MNIST (logistic models, d = 7850; ``gamma = 0.01``:
78 floats a message) for ``--rounds`` rounds over ``transport = gloo`` and over ``transport = tls``,
alternating so both see the same machine; the time is the run's own ``wall_seconds`` (the rounds
and evaluations, not the start of the processes). Prints one JSON object with each run's time, the
best of each and their ratio (TLS over Gloo), and the ratio of the medians."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KEYS = ["dataset=rmnist", "clients=6", "processes=3", "gamma=0.01", "eval_every=50"]


def run(out: Path, rounds: int, extra: list[str]) -> float:
    argv = [sys.executable, "-m", "sheaf_fmtl", "run", "--quiet", "--overwrite", "--out", str(out)]
    subprocess.run(
        [*argv, "--set", *KEYS, f"rounds={rounds}", *extra],
        check=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
    )
    return float(json.loads((out / "summary.json").read_text())["wall_seconds"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp) / "certs"
        subprocess.run(
            [sys.executable, "-m", "sheaf_fmtl", "certs", "init", "--clients", "3", "--out", str(certs)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times: dict[str, list[float]] = {"gloo": [], "tls": []}
        for _ in range(args.repeats):
            times["gloo"].append(run(Path(tmp) / "gloo", args.rounds, []))
            times["tls"].append(run(Path(tmp) / "tls", args.rounds, ["transport=tls", f"tls_certs={certs}"]))
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "rounds": args.rounds,
        "seconds": times,
        "best": best,
        "tls_over_gloo": best["tls"] / best["gloo"],
        "median_tls_over_gloo": median["tls"] / median["gloo"],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
