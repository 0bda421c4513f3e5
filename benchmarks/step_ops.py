"""Aten ops per mini-batch step and seconds per round of an R-MNIST-shaped round (dFedU and redrawn
selections), counted with ``torch.profiler`` on the CPU; optionally the same measurement of another
commit's code in the same run, interleaved, for a side-by-side ratio.

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_ops.py --against HEAD~1 --out FILE

The data are generated Gaussian images of R-MNIST's shape (40 clients, 1x28x28, 10 classes,
1500 samples per client before the paper's 75/25 split), so no dataset is needed; the round is
``local_epochs=1, batch_size=32`` (36 mini-batch steps a round at the default size).

Counts (``sheaf_fmtl.bench.ops``: ``dispatched``, ``inner``, ``all``) of one profiled round divided
by the round's local steps, so the coupling step's ops are spread over the steps, as a GPU profile of
a round would count them: ``ops_per_step`` (aten ops the library dispatches that do work, views and
allocations left out), ``inner_ops_per_step`` (innermost ops that do work) and ``all_aten_per_step``
(every ``aten::*`` event, views included).

``--alternate`` times two simulations in one process instead, one per CNN kernel (``im2col``, the
path before the fused step, and ``fused``), round by round. ``--device cuda`` also counts kernel
launches; ``--kernels fused,im2col`` adds a measurement per kernel (``benchmarks/gpu-round.sh``).

``--against REV`` extracts ``src/`` of commit ``REV`` (``git archive``) into a temporary folder
and measures it in a subprocess, alternating with this checkout's code (``--pairs`` pairs); the
ratio is the median of old / new round times over the pairs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "dfedu": {"algorithm": "dfedu", "lam": 1.0},
    "redrawn": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "lam": 10.0, "stability_check": False},
}


def build(
    variant: str | dict[str, Any], clients: int, samples: int, device: str = "cpu", **extra: Any
) -> Any:
    """The simulation of ``variant`` (a name of :data:`VARIANTS`, or its keys) on generated
    R-MNIST-shaped data, with ``extra`` config keys on top."""
    import dataclasses

    from sheaf_fmtl.bench.settings import PAPER
    from sheaf_fmtl.bench.synthetic import make_dataset
    from sheaf_fmtl.config.schema import from_mapping
    from sheaf_fmtl.federation import build_federation
    from sheaf_fmtl.runtime.engine.simulate import build_simulation

    s = dataclasses.replace(PAPER, name="rmnist-shape", clients=clients, samples=samples, graph_p=0.15)
    keys = dict(
        dataset="bench-rmnist-shape",
        model="cnn",
        clients=clients,
        graph="erdos-renyi",
        graph_p=0.15,
        local_epochs=1,
        batch_size=32,
        alpha=0.05,
        gamma=0.01,
        l2=1e-4,
        seed=0,
        device=device,
    )
    chosen = VARIANTS[variant] if isinstance(variant, str) else variant
    cfg = from_mapping({**keys, **chosen, **extra})
    fed = build_federation(make_dataset(s), "cnn", l2=cfg.l2, device=device)
    return build_simulation(cfg, fed=fed)


def count_ops(sim: Any) -> dict[str, Any]:
    """Profile one ``sim.step()``: aten ops per local step (see the module docstring)."""
    import importlib.util

    # this checkout's counter, also when the measured code is another commit's (--against)
    spec = importlib.util.spec_from_file_location("_ops", ROOT / "src/sheaf_fmtl/bench/ops.py")
    assert spec is not None and spec.loader is not None
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    counts = ops.count_aten_ops(sim.step)
    steps = sim.ctx.local_steps()
    return {
        "steps_per_round": steps,
        "ops_per_step": counts["dispatched"] / steps,
        "inner_ops_per_step": counts["inner"] / steps,
        "all_aten_per_step": counts["all"] / steps,
        "ops_per_round": counts["dispatched"],
        "top_ops_per_round": counts["names"],
    }


def measure(
    variant: str, clients: int, samples: int, rounds: int, count: bool, device: str = "cpu", kernel: str = ""
) -> dict[str, Any]:
    """Seconds per round (median of ``rounds`` after one warm-up round) and, with ``count``, the op
    counts of one more round (on CUDA also its kernel launches). ``kernel``: the cohorts' CNN kernel
    (``fused`` or ``im2col``; empty: the library's default for the device)."""
    import torch

    sim = build(variant, clients, samples, device)
    for cohort in sim.ctx.fed.cohorts:
        if kernel and hasattr(cohort, "cnn_kernel"):
            cohort.cnn_kernel = kernel
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sim.step()
    sync()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        sim.step()
        sync()
        times.append(time.perf_counter() - t)
    out: dict[str, Any] = {"variant": variant, "s_per_round": statistics.median(times)}
    out.update(threads=torch.get_num_threads(), device=device, kernel=kernel or "default")
    if device.startswith("cuda"):
        out["device_name"] = torch.cuda.get_device_name()
        out["launches_per_step"] = count_launches(sim) / sim.ctx.local_steps()
    if count:
        out.update(count_ops(sim))
    thetas = torch.cat([t.flatten() for t in sim.state.thetas])
    out["theta_checksum"] = float(thetas.double().abs().sum())
    return out


def alternate(variant: str, clients: int, samples: int, rounds: int, device: str = "cpu") -> dict[str, Any]:
    """Rounds of two simulations of ``variant`` in one process, one per CNN kernel (``im2col``: the
    gradient path before the fused step; ``fused``), alternating round by round so that both see the
    same load; the ratio is the median over the pairs of im2col time / fused time."""
    import torch

    sims = {k: build(variant, clients, samples, device) for k in ("im2col", "fused")}
    for kernel, sim in sims.items():
        for cohort in sim.ctx.fed.cohorts:
            cohort.cnn_kernel = kernel
        sim.step()
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times: dict[str, list[float]] = {k: [] for k in sims}
    for r in range(rounds):
        for kernel in sorted(sims, reverse=r % 2 == 1):  # alternate which goes first
            t = time.perf_counter()
            sims[kernel].step()
            sync()
            times[kernel].append(time.perf_counter() - t)
    ratios = [a / b for a, b in zip(times["im2col"], times["fused"], strict=True)]
    return {"variant": variant, "s_per_round": times, "ratio_im2col_over_fused": statistics.median(ratios)}


def count_launches(sim: Any) -> int:
    """CUDA kernel launches of one ``sim.step()`` (``cudaLaunchKernel`` and its variants)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.step()
        torch.cuda.synchronize()
    names = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
    return sum(1 for e in prof.events() if e.name in names)


def _child(
    src: Path, args: argparse.Namespace, variant: str, count: bool, kernel: str = ""
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--child", variant, "--clients", str(args.clients)]
    cmd += ["--samples", str(args.samples), "--rounds", str(args.rounds), "--device", args.device]
    cmd += ["--kernel", kernel] + (["--count"] if count else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _archive(rev: str, into: Path) -> Path:
    """``src/`` of commit ``rev`` extracted under ``into``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(blob.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="dfedu,redrawn")
    p.add_argument("--clients", type=int, default=40)
    p.add_argument("--samples", type=int, default=1500, help="per client, before the 75/25 split")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per measurement (median)")
    p.add_argument("--against", default="", help="a git revision to measure side by side")
    p.add_argument("--pairs", type=int, default=2, help="interleaved old/new measurements with --against")
    p.add_argument("--out", default="", help="write the results as JSON here")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--kernels", default="", help="CNN kernels to measure, e.g. fused,im2col (default: the library's)"
    )
    p.add_argument(
        "--alternate",
        action="store_true",
        help="time the im2col and fused kernels round by round in one process",
    )
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--kernel", default="", help=argparse.SUPPRESS)
    p.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        out = measure(
            args.child, args.clients, args.samples, args.rounds, args.count, args.device, args.kernel
        )
        print(json.dumps(out))
        return
    if args.alternate:
        out = {
            v: alternate(v, args.clients, args.samples, args.rounds, args.device)
            for v in args.variants.split(",")
        }
        for v, r in out.items():
            med = {k: statistics.median(t) for k, t in r["s_per_round"].items()}
            print(
                f"{v}: im2col {med['im2col']:.3f} s/round, fused {med['fused']:.3f} s/round, "
                f"im2col/fused {r['ratio_im2col_over_fused']:.2f}x (median, {args.rounds} pairs)"
            )
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        return
    new_src = ROOT / "src"
    result: dict[str, Any] = {"clients": args.clients, "samples": args.samples, "device": args.device}
    result["variants"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        old_src = _archive(args.against, Path(tmp)) if args.against else None
        for variant in args.variants.split(","):
            runs: dict[str, list[dict[str, Any]]] = {"new": [], "old": []}
            for pair in range(args.pairs if old_src else 1):
                if old_src is not None:
                    runs["old"].append(_child(old_src, args, variant, count=pair == 0))
                runs["new"].append(_child(new_src, args, variant, count=pair == 0))
            entry: dict[str, Any] = {"new": runs["new"]}
            for kernel in [k for k in args.kernels.split(",") if k]:
                r = entry[f"kernel-{kernel}"] = _child(new_src, args, variant, count=True, kernel=kernel)
                launches = f", {r['launches_per_step']:.1f} launches/step" if "launches_per_step" in r else ""
                speed = f"{r['ops_per_step']:.1f} ops/step{launches}, {r['s_per_round']:.4f} s/round"
                print(f"{variant} kernel={kernel}: {speed}")
            line = f"{variant}: {runs['new'][0]['ops_per_step']:.1f} ops/step"
            line += f" ({runs['new'][0]['all_aten_per_step']:.1f} aten events incl. views)"
            new_s = statistics.median(r["s_per_round"] for r in runs["new"])
            line += f", {new_s:.4f} s/round"
            if "launches_per_step" in runs["new"][0]:
                line += f", {runs['new'][0]['launches_per_step']:.1f} launches/step"
            if old_src is not None:
                old_s = statistics.median(r["s_per_round"] for r in runs["old"])
                ratios = [
                    o["s_per_round"] / n["s_per_round"] for o, n in zip(runs["old"], runs["new"], strict=True)
                ]
                entry.update(old=runs["old"], against=args.against, speedup=statistics.median(ratios))
                line += (
                    f"; {args.against}: {runs['old'][0]['ops_per_step']:.1f} ops/step"
                    f" ({runs['old'][0]['all_aten_per_step']:.1f}), {old_s:.3f} s/round;"
                    f" old/new time {statistics.median(ratios):.2f}x"
                )
            result["variants"][variant] = entry
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
