"""The defaults table: `sheaf-fmtl run --set dataset=NAME` with every other key at its default,
against local training with the same keys and dFedU at its best `lam` (chosen on a validation
split, never on test data), over seeds; paired differences against local training.

    PYTHONPATH=src .venv/bin/python benchmarks/defaults_table.py --out benchmarks/results/defaults
    # real data: SHEAF_FMTL_DATA=DIR (school, vehicle); --problems to choose; --seeds 5 6 7 8
    # another local optimizer for every run: --keys '{"optimizer": "AdamW", "alpha": 0.001}'

The second table: the rivals on the problems with one model size (pFedGraph with its `lam` chosen
on the validation split as dFedU's, DPFL, FedAvg and D-PSGD with fine-tuning, partial
personalisation at their defaults). Writes `defaults.json` (every run's final metric, mode, lam,
bits) and `defaults.md` (the tables) into
`--out`, and keeps going from what `defaults.json` already holds (resumable: run it in the background).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import sheaf_fmtl

#: name -> (keys, whether dFedU can run: one model size on every client)
PROBLEMS: dict[str, tuple[dict[str, Any], bool]] = {
    "synthetic-clusters": ({"dataset": "synthetic-clusters"}, False),
    "synthetic-clusters homogeneous": (
        {"dataset": "synthetic-clusters", "data": {"homogeneous": True}},
        True,
    ),
    "synthetic-clusters homogeneous, gamma 0.1": (
        {"dataset": "synthetic-clusters", "data": {"homogeneous": True}, "gamma": 0.1},
        True,
    ),
    "synthetic-clusters homogeneous, gamma 0.02": (
        {"dataset": "synthetic-clusters", "data": {"homogeneous": True}, "gamma": 0.02},
        True,
    ),
    "synthetic-hetero": ({"dataset": "synthetic-hetero"}, False),
    "synthetic": ({"dataset": "synthetic"}, True),
    "vehicle": ({"dataset": "vehicle"}, True),
    "school": ({"dataset": "school"}, True),
}
DFEDU_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)
VALIDATION = 0.2
#: The rivals of the second table (one model size on every client): tag -> (display, keys, the key
#: tuned on the validation split over DFEDU_GRID as dFedU's `lam`, or None: their defaults).
RIVALS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "pfedgraph": ("pFedGraph", {"algorithm": "pfedgraph"}, "lam"),
    "dpfl": ("DPFL", {"algorithm": "dpfl"}, None),
    "fedavg-ft": ("FedAvg + FT", {"algorithm": "fedavg-ft"}, None),
    "dpsgd-ft": ("D-PSGD + FT", {"algorithm": "dpsgd-ft"}, None),
    "partial": ("partial", {"algorithm": "partial"}, None),
}


def one(keys: dict[str, Any]) -> dict[str, Any]:
    """One run's final metric and what ran."""
    result = sheaf_fmtl.run(**keys)
    s = result.summary
    return {
        "final": s["final"],
        "higher_is_better": s["higher_is_better"],
        "maps": s.get("maps"),
        "lam": s.get("lam"),
        "bits": s["transmitted_bits"],
    }


def best_value(
    keys: dict[str, Any], done: dict[str, Any], algorithm: str = "dfedu", key: str = "lam"
) -> float:
    """``key`` of ``algorithm`` (dFedU's `lam` by default) with the best validation metric over
    :data:`DFEDU_GRID` (seed 0, `validation` of the training data)."""
    scores = {}
    for value in DFEDU_GRID:
        tag = (
            f"{algorithm}-validation-{key}{value}" if algorithm != "dfedu" else f"dfedu-validation-lam{value}"
        )
        if tag not in done:
            try:
                done[tag] = one(
                    {**keys, "algorithm": algorithm, key: value, "validation": VALIDATION, "seed": 0}
                )
            except sheaf_fmtl.ConfigError as err:  # refused at start-up (unstable): not a candidate
                done[tag] = {"refused": str(err)}
        if "final" in done[tag]:
            scores[value] = done[tag]["final"] * (1 if done[tag]["higher_is_better"] else -1)
    return max(scores, key=lambda k: scores[k])


def run_rivals(keys: dict[str, Any], done: dict[str, Any], seed: int) -> None:
    """Each of :data:`RIVALS` on ``seed`` (its tuned key chosen once, on the validation split)."""
    for tag, (_, extra, tuned) in RIVALS.items():
        settings = {**keys, **extra}
        if tuned is not None:
            if f"{tag}-{tuned}" not in done:
                done[f"{tag}-{tuned}"] = best_value(keys, done, extra["algorithm"], tuned)
            settings[tuned] = done[f"{tag}-{tuned}"]
        if f"{tag}-{seed}" not in done:
            try:
                done[f"{tag}-{seed}"] = one({**settings, "seed": seed})
            except sheaf_fmtl.ConfigError as err:  # e.g. a model too small to split: not run
                done[f"{tag}-{seed}"] = {"refused": str(err)}


def rivals_table(results: dict[str, dict[str, Any]], seeds: list[int]) -> str:
    """Each rival's mean ± standard error and, in brackets, the defaults minus it (paired by seed)."""
    head = "| problem | defaults | " + " | ".join(d for d, _, _ in RIVALS.values()) + " |\n"
    head += "| --- | --- |" + " --- |" * len(RIVALS) + "\n"
    rows = []
    for name, done in results.items():
        if not all(f"default-{s}" in done for s in seeds) or not any(
            f"{t}-{seeds[0]}" in done for t in RIVALS
        ):
            continue
        default = [done[f"default-{s}"] for s in seeds]
        scale = 100.0 if default[0]["higher_is_better"] else 1.0
        d = mean_se([r["final"] * scale for r in default])
        cells = [f"{d[0]:.2f} ± {d[1]:.2f}"]
        for tag, (_, _, tuned) in RIVALS.items():
            runs = [done.get(f"{tag}-{s}", {}) for s in seeds]
            if not all("final" in r for r in runs):
                cells.append("-")
                continue
            m = mean_se([r["final"] * scale for r in runs])
            gap = mean_se([(a["final"] - b["final"]) * scale for a, b in zip(default, runs, strict=True)])
            chosen = f", {tuned} {done[f'{tag}-{tuned}']:g}" if tuned else ""
            cells.append(f"{m[0]:.2f} ± {m[1]:.2f} ({gap[0]:+.2f}{chosen})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def mean_se(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, float("nan")
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values))


def table(results: dict[str, dict[str, Any]], seeds: list[int]) -> str:
    """The markdown table of :data:`PROBLEMS` that have every run."""
    head = (
        "| problem | the defaults ran | defaults | local training | difference (paired) | dFedU (best lam) | "
        "defaults - dFedU | bits, defaults / dFedU |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    rows = []
    for name, done in results.items():
        if not all(f"{a}-{s}" in done for a in ("default", "local") for s in seeds):
            continue
        default = [done[f"default-{s}"] for s in seeds]
        local = [done[f"local-{s}"] for s in seeds]
        scale = 100.0 if default[0]["higher_is_better"] else 1.0
        d, lo = mean_se([r["final"] * scale for r in default]), mean_se([r["final"] * scale for r in local])
        diff = mean_se([(a["final"] - b["final"]) * scale for a, b in zip(default, local, strict=True)])
        ran = f"{default[0]['maps']}, lam {default[0]['lam']:.4g}"
        dfedu = [done[f"dfedu-{s}"] for s in seeds if f"dfedu-{s}" in done]
        if len(dfedu) == len(seeds):
            du = mean_se([r["final"] * scale for r in dfedu])
            gap = mean_se([(a["final"] - b["final"]) * scale for a, b in zip(default, dfedu, strict=True)])
            bits = sum(r["bits"] for r in default) / max(1, sum(r["bits"] for r in dfedu))
            extra = f"{du[0]:.2f} ± {du[1]:.2f} (lam {done['dfedu-lam']:g}) | {gap[0]:+.2f} | {bits:.3f}"
        else:
            extra = "- | - | -"
        measured = f"{d[0]:.2f} ± {d[1]:.2f} | {lo[0]:.2f} ± {lo[1]:.2f} | {diff[0]:+.2f} ± {diff[1]:.2f}"
        rows.append(f"| {name} | {ran} | {measured} | {extra} |")
    return head + "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/defaults-table")
    parser.add_argument("--problems", nargs="*", default=list(PROBLEMS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[5, 6, 7, 8])
    parser.add_argument("--no-rivals", dest="rivals", action="store_false", help="only the first table")
    parser.add_argument(
        "--keys",
        type=json.loads,
        default={},
        help='keys on top of every run\'s, e.g. \'{"optimizer": "AdamW", "alpha": 0.001}\'',
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "defaults.json"
    results: dict[str, dict[str, Any]] = json.loads(store.read_text())["runs"] if store.is_file() else {}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    for name in args.problems:
        keys, dfedu = PROBLEMS[name]
        keys = {**keys, **args.keys}  # (e.g. another local optimizer: the AdamW column)
        done = results.setdefault(name, {})
        for seed in args.seeds:
            for tag, extra in (("default", {}), ("local", {"algorithm": "local"})):
                if f"{tag}-{seed}" not in done:
                    done[f"{tag}-{seed}"] = one({**keys, **extra, "seed": seed})
            if dfedu:
                if "dfedu-lam" not in done:
                    done["dfedu-lam"] = best_value(keys, done)
                if f"dfedu-{seed}" not in done:
                    done[f"dfedu-{seed}"] = one(
                        {**keys, "algorithm": "dfedu", "lam": done["dfedu-lam"], "seed": seed}
                    )
                if args.rivals and "gamma" not in keys:  # the rivals read no gamma: once a problem
                    run_rivals(keys, done, seed)
            store.write_text(json.dumps({"commit": commit, "seeds": args.seeds, "runs": results}, indent=1))
            print(f"{name} seed {seed}: done", file=sys.stderr, flush=True)
    text = table(results, args.seeds)
    text += (
        "\nThe rivals (mean ± standard error; in brackets the defaults minus the rival, paired by seed):\n\n"
    )
    text += rivals_table(results, args.seeds)
    about = f"Seeds {args.seeds}; commit {commit}; {os.cpu_count()} CPUs.\n\n"
    (out / "defaults.md").write_text(about + text)
    print(text)


if __name__ == "__main__":
    main()
