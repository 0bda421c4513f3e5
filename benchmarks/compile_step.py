"""The local epochs' static step compiled (``compile=true``) against the uncompiled loop
(``compile=false``), side by side in one process on an R-MNIST-shaped round: aten ops per
mini-batch step and seconds per round, for dFedU, redrawn selections and proxies.

    PYTHONPATH=src .venv/bin/python benchmarks/compile_step.py --static --out benchmarks/results/compile-cpu

The data are generated Gaussian images of R-MNIST's shape (``benchmarks/step_ops.py``: 40 clients,
1x28x28, 10 classes, the paper's split, so half of the clients hold a fifth of the samples), the
round ``local_epochs=1, batch_size=32``. Both simulations of a variant start from the same seed;
the first round of each (the compiled one compiles then) is left out, then rounds alternate
between them, the order swapped each pair, and the ratio is the median over the pairs of loop
time / compiled time (above 1: compiled faster). ``--static`` adds the static step run uncompiled,
so the cost of the static shapes and that of the compiled code are told apart. Where a variant
cannot take the static step (``proxy``), the run falls back to the loop and its note is recorded.
The ops are counted on one more round of each (``sheaf_fmtl.bench.ops``; a compiled graph's
kernels are not aten ops: its count is what runs outside the graphs). Writes
``compile_step.json`` (every number, the date, the machine, the load average) into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_ops import build as build_step_ops  # noqa: E402
from step_ops import count_ops  # noqa: E402

VARIANTS = {
    "dfedu": {"algorithm": "dfedu", "lam": 1.0},
    "redrawn": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "lam": 10.0, "stability_check": False},
    "proxy": {"algorithm": "sheaf-fmtl", "maps": "proxy", "stability_check": False},
}


def build(variant: str, clients: int, samples: int, compile_: bool) -> Any:
    """The simulation of ``variant`` on generated R-MNIST-shaped data, ``compile`` as given."""
    return build_step_ops(VARIANTS[variant], clients, samples, compile=compile_)


def side_by_side(
    variant: str, clients: int, samples: int, pairs: int, count: bool, arms: tuple[str, ...]
) -> dict[str, Any]:
    """The ``arms`` of ``variant`` (``loop``, ``compiled``, and ``static``: the static step
    uncompiled, which tells the cost of the static shapes from that of the compiled code), round by
    round (see the module docstring)."""
    import torch

    from sheaf_fmtl.algorithms.training.epoch import StaticEpoch

    sims = {name: build(variant, clients, samples, name != "loop") for name in arms}
    if "static" in sims and sims["static"].compiled:
        sims["static"].ctx.static_epoch = StaticEpoch(compiled=False)
    first = {}
    for name, sim in sims.items():
        t = time.perf_counter()
        sim.step()
        first[name] = time.perf_counter() - t
    times: dict[str, list[float]] = {k: [] for k in sims}
    for p in range(pairs):
        for name in sorted(sims, reverse=p % 2 == 1):
            t = time.perf_counter()
            sims[name].step()
            times[name].append(time.perf_counter() - t)
    ratios = {
        f"loop_over_{k}": statistics.median(a / b for a, b in zip(times["loop"], times[k], strict=True))
        for k in sims
        if k != "loop"
    }
    a, b = sims["loop"].state.thetas, sims["compiled"].state.thetas
    diff = max(float((x - y).norm() / y.norm()) for x, y in zip(a, b, strict=True))
    out: dict[str, Any] = {
        "variant": variant,
        "compiled": bool(sims["compiled"].compiled),
        "compile_note": sims["compiled"].compile_note,
        "steps_per_round": sims["loop"].ctx.local_steps(),
        "first_round_s": first,
        "s_per_round": times,
        "median_s_per_round": {k: statistics.median(v) for k, v in times.items()},
        **ratios,
        "theta_rel_diff": diff,
        "threads": torch.get_num_threads(),
    }
    if count:
        out["ops"] = {k: count_ops(sim) for k, sim in sims.items()}
        for entry in out["ops"].values():
            entry.pop("top_ops_per_round", None)
    return out


def profile_step(variant: str, clients: int, samples: int, calls: int = 3) -> dict[str, Any]:
    """Self CPU seconds per step by op (``torch.profiler``) of one cohort's static step, uncompiled
    and compiled, on the first step of an epoch (every client has a sample)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from sheaf_fmtl.algorithms.training.epoch import StaticEpoch, static_step

    sim = build(variant, clients, samples, True)
    (cohort,) = sim.ctx.fed.cohorts
    (plan,) = sim.ctx.epoch_plans()
    idx, masks, active = StaticEpoch(compiled=False)._inputs(0, cohort, plan, sim.config.batch_size)
    theta = sim.state.thetas[0]
    args = (theta, theta, theta, theta.new_zeros(len(theta)), cohort.x_train, cohort.y_train)
    args += (idx[0], masks[0], active[0], torch.tensor(sim.config.alpha))
    eager = static_step(cohort, sim.config)
    out: dict[str, Any] = {}
    for name, fn in (("static", eager), ("compiled", torch.compile(eager, fullgraph=True, dynamic=False))):
        fn(*args)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn(*args)
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:10]
        out[name] = {e.key[:60]: e.self_cpu_time_total / 1e6 / calls for e in rows}
        out[name]["total"] = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e6 / calls
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="dfedu,redrawn,proxy")
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--samples", type=int, default=1500, help="per client, before the 75/25 split")
    p.add_argument("--pairs", type=int, default=3, help="timed rounds of each, alternating")
    p.add_argument("--no-count", action="store_true", help="skip the op counts (one round each)")
    p.add_argument("--static", action="store_true", help="also time the static step uncompiled")
    p.add_argument("--profile", action="store_true", help="profile one step of the first variant by op")
    p.add_argument("--out", default="", help="folder for compile_step.json")
    args = p.parse_args()
    from sheaf_fmtl.bench.machine import machine

    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_start": list(os.getloadavg()),
        "clients": args.clients,
        "samples": args.samples,
        "pairs": args.pairs,
        "variants": {},
    }
    for variant in args.variants.split(","):
        arms = ("loop", "static", "compiled") if args.static else ("loop", "compiled")
        r = side_by_side(variant, args.clients, args.samples, args.pairs, not args.no_count, arms)
        result["variants"][variant] = r
        med = r["median_s_per_round"]
        line = f"{variant}: " + ", ".join(f"{k} {med[k]:.3f} s/round" for k in arms) + "; "
        line += ", ".join(f"loop/{k} {r[f'loop_over_{k}']:.2f}x" for k in arms[1:])
        first = r["first_round_s"]["compiled"]
        line += f" (medians of {args.pairs} pairs); first round (compiles) {first:.1f} s"
        if "ops" in r:
            line += "; ops/step " + ", ".join(f"{k} {v['ops_per_step']:.1f}" for k, v in r["ops"].items())
        if r["compile_note"]:
            line += f"; {r['compile_note']}"
        print(line, flush=True)
    if args.profile:
        variant = args.variants.split(",")[0]
        result["profile"] = prof = profile_step(variant, args.clients, args.samples)
        for name, ops in prof.items():
            top = ", ".join(f"{k} {v:.3f}" for k, v in ops.items())
            print(f"{variant} {name} step, self CPU s by op: {top}", flush=True)
    result["load_average_end"] = list(os.getloadavg())
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "compile_step.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
