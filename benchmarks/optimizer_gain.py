"""Collaboration under the researcher's optimizer: the gain of the default Sheaf-FMTL and of dFedU
over local training with the same local optimizer, with the coupling step of its own
(`coupling_step = null`, the default: the optimizer's effective step, measured) beside the coupling
step tied to the learning rate (`coupling_step = alpha`, the earlier releases' coupling), over seeds
no one tuned on; paired differences by seed.

    PYTHONPATH=src .venv/bin/python benchmarks/optimizer_gain.py --out docs/results/optimizer-gain
    # --validation 0.2: score on a validation split (how the rule is chosen; never on test data)
    # real data: SHEAF_FMTL_DATA=DIR (vehicle); --problems, --optimizers, --seeds to choose

Writes `optimizer_gain.json` (every run's final metric and coupling step) and `optimizer_gain.md`
into `--out`, and keeps going from what the json already holds (resumable: run it in the background).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

import sheaf_fmtl

PROBLEMS: dict[str, dict[str, Any]] = {
    "synthetic-clusters homogeneous": {"dataset": "synthetic-clusters", "data": {"homogeneous": True}},
    "vehicle": {"dataset": "vehicle"},
}
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "default SGD (alpha 0.05)": {},
    "AdamW alpha=0.001": {"optimizer": "AdamW", "alpha": 0.001},
    "Adam alpha=0.01": {"optimizer": "Adam", "alpha": 0.01},
    "SGD momentum=0.9 alpha=0.01": {"optimizer": "SGD", "optimizer_args": {"momentum": 0.9}, "alpha": 0.01},
    "default SGD, local_epochs=5": {"local_epochs": 5},
}
#: tag -> keys on top of the problem's and the optimizer's
METHODS: dict[str, dict[str, Any]] = {
    "local": {"algorithm": "local"},
    "sheaf-fmtl": {"algorithm": "sheaf-fmtl"},
    "dfedu": {"algorithm": "dfedu"},
    "sheaf-fmtl tied": {"algorithm": "sheaf-fmtl", "coupling_step": "alpha"},
    "dfedu tied": {"algorithm": "dfedu", "coupling_step": "alpha"},
}


def keys_of(problem: str, optimizer: str, method: str, seed: int, validation: float) -> dict[str, Any]:
    keys = {**PROBLEMS[problem], **OPTIMIZERS[optimizer], **METHODS[method], "seed": seed}
    if keys.get("coupling_step") == "alpha":
        keys["coupling_step"] = keys.get("alpha", 0.05)
    if validation:
        keys["validation"] = validation
    return keys


def one(keys: dict[str, Any]) -> dict[str, Any]:
    s = sheaf_fmtl.run(**keys).summary
    return {k: s.get(k) for k in ("final", "lam", "maps", "coupling_step_mean", "pull_per_round")}


def mean_se(values: list[float]) -> tuple[float, float]:
    m = statistics.mean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return m, se


def table(
    done: dict[str, Any], problems: list[str], optimizers: list[str], seeds: list[int], scale: float
) -> str:
    lines = [
        "| problem | local optimizer | local | Sheaf-FMTL gain | dFedU gain | Sheaf-FMTL gain, step tied to alpha "
        "| dFedU gain, tied | Sheaf-FMTL c (mean) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in problems:
        for o in optimizers:
            runs = {m: [done.get(f"{p}|{o}|{m}|{s}") for s in seeds] for m in METHODS}
            if any(r is None for rs in runs.values() for r in rs):
                continue
            local = [r["final"] * scale for r in runs["local"]]
            cells = [f"{mean_se(local)[0]:.2f}"]
            for m in ("sheaf-fmtl", "dfedu", "sheaf-fmtl tied", "dfedu tied"):
                gain = [r["final"] * scale - b for r, b in zip(runs[m], local, strict=True)]
                g, se = mean_se(gain)
                cells.append(f"{g:+.2f} ± {se:.2f}")
            cells.append(f"{statistics.mean(r['coupling_step_mean'] for r in runs['sheaf-fmtl']):.3g}")
            lines.append(f"| {p} | {o} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--optimizers", nargs="*", default=list(OPTIMIZERS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[5, 6, 7])
    parser.add_argument("--validation", type=float, default=0.0)
    args = parser.parse_args()
    problems = [p for p in args.problems if p != "vehicle" or os.environ.get("SHEAF_FMTL_DATA")]
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "optimizer_gain.json"
    done: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    for p in problems:
        for o in args.optimizers:
            for s in args.seeds:
                for m in METHODS:
                    key = f"{p}|{o}|{m}|{s}"
                    if key not in done:
                        done[key] = one(keys_of(p, o, m, s, args.validation))
                        store.write_text(json.dumps(done, indent=1))
            print(table(done, [p], [o], args.seeds, 100.0).splitlines()[-1], flush=True)
    where = f"validation split {args.validation:g}" if args.validation else "test split"
    text = (
        f"Gain over local training with the same optimizer (points of accuracy, {where}), 200 rounds, "
        f"seeds {args.seeds}, mean ± standard error of the paired differences.\n\n"
        + table(done, problems, args.optimizers, args.seeds, 100.0)
        + "\n"
    )
    (args.out / "optimizer_gain.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
