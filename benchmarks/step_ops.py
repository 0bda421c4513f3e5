"""Aten ops per mini-batch step and seconds per round of an R-MNIST-shaped round (dFedU and redrawn
selections), counted with ``torch.profiler`` on the CPU; optionally the same measurement of another
commit's code in the same run, interleaved, for a side-by-side ratio.

    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/step_ops.py --against HEAD~1 --out FILE

The data are generated Gaussian images of R-MNIST's shape (40 clients, 1x28x28, 10 classes,
1500 samples per client before the paper's 75/25 split), so no dataset is needed; the round is
``local_epochs=1, batch_size=32`` (36 mini-batch steps a round at the default size).

Counts, per round divided by the round's local steps (so the coupling step's ops are spread over
the steps, as a GPU profile of a round would count them):

* ``ops_per_step``: the aten ops the library dispatches that do work: profiler events named
  ``aten::*`` called from outside aten (from Python or the autograd engine, not from inside another
  aten op), less those that only make views, allocate or read metadata (``view``, ``reshape`` of a
  contiguous tensor, ``transpose``, ``empty``, ``to`` of a tensor already there, ...; each of these
  counts when something inside it copies);
* ``inner_ops_per_step``: innermost ops that do work (no aten child that does work): a composite
  op counts once per kernel it calls (``cross_entropy`` = ``_log_softmax`` + ``nll_loss``), an op
  with helpers (a oneDNN convolution's ``copy_``) once per helper;
* ``all_aten_per_step``: every ``aten::*`` event at any nesting depth, views included.

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
VIEW_OPS = {
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::as_strided",
    "aten::transpose",
    "aten::t",
    "aten::permute",
    "aten::expand",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::slice",
    "aten::select",
    "aten::split",
    "aten::split_with_sizes",
    "aten::narrow",
    "aten::unflatten",
    "aten::flatten",
    "aten::alias",
    "aten::detach",
    "aten::detach_",
    "aten::lift_fresh",
    "aten::_reshape_alias",
    "aten::unbind",
    "aten::chunk",
    "aten::view_as",
    "aten::expand_as",
    "aten::contiguous",  # a no-op on a contiguous tensor; a copy shows up as its aten::copy_ child
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::set_",
    "aten::result_type",
    "aten::is_nonzero",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::size",
    "aten::stride",
    "aten::dim",
    "aten::_has_compatible_shallow_copy_type",
    "aten::is_same_size",
    "aten::to",  # a no-op when the tensor is there already; a conversion shows up as _to_copy
    "aten::resize_",
    "aten::as_strided_",
    "aten::zeros_like",  # work: its fill_/zero_
    "aten::new_zeros",
    "aten::new_full",
    "aten::new_empty",
    "aten::full",
}
VARIANTS = {
    "dfedu": {"algorithm": "dfedu", "lam": 1.0},
    "redrawn": {"algorithm": "sheaf-fmtl", "maps": "redrawn", "lam": 10.0, "stability_check": False},
}


def build(variant: str, clients: int, samples: int) -> Any:
    """The simulation of ``variant`` on generated R-MNIST-shaped data (CPU)."""
    import dataclasses

    from sheaf_fmtl.bench.settings import PAPER
    from sheaf_fmtl.bench.synthetic import make_dataset
    from sheaf_fmtl.config.schema import from_mapping
    from sheaf_fmtl.federation import build_federation
    from sheaf_fmtl.runtime.simulate import build_simulation

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
        device="cpu",
    )
    cfg = from_mapping({**keys, **VARIANTS[variant]})
    fed = build_federation(make_dataset(s), "cnn", l2=cfg.l2, device="cpu")
    return build_simulation(cfg, fed=fed)


def count_ops(sim: Any) -> dict[str, float]:
    """Profile one ``sim.step()``: aten ops per local step (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        sim.step()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    busy: dict[int, bool] = {}

    def works(e: Any) -> bool:
        if id(e) not in busy:
            kids = [c for c in e.cpu_children if c.name.startswith("aten::")]
            busy[id(e)] = e.name not in VIEW_OPS or any(works(c) for c in kids)
        return busy[id(e)]

    def outer(e: Any) -> bool:
        return e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")

    dispatched = [e for e in events if outer(e) and works(e)]
    inner = [
        e for e in events if works(e) and not any(c.name.startswith("aten::") and works(c) for c in e.cpu_children)
    ]
    steps = sim.ctx.local_steps()
    names: dict[str, int] = {}
    for e in dispatched:
        names[e.name] = names.get(e.name, 0) + 1
    top = dict(sorted(names.items(), key=lambda kv: -kv[1]))
    return {
        "steps_per_round": steps,
        "ops_per_step": len(dispatched) / steps,
        "inner_ops_per_step": len(inner) / steps,
        "all_aten_per_step": len(events) / steps,
        "ops_per_round": len(dispatched),
        "top_ops_per_round": top,  # type: ignore[dict-item]
    }


def measure(variant: str, clients: int, samples: int, rounds: int) -> dict[str, Any]:
    """Seconds per round (median of ``rounds`` after one warm-up round) and the op counts."""
    import torch

    sim = build(variant, clients, samples)
    sim.step()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        sim.step()
        times.append(time.perf_counter() - t)
    out = {"variant": variant, "s_per_round": statistics.median(times), "threads": torch.get_num_threads()}
    out.update(count_ops(sim))
    thetas = torch.cat([t.flatten() for t in sim.state.thetas])
    out["theta_checksum"] = float(thetas.double().abs().sum())
    return out


def _child(src: Path, args: argparse.Namespace, variant: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--child", variant, "--clients", str(args.clients)]
    cmd += ["--samples", str(args.samples), "--rounds", str(args.rounds)]
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
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.clients, args.samples, args.rounds)))
        return
    new_src = ROOT / "src"
    result: dict[str, Any] = {"clients": args.clients, "samples": args.samples, "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        old_src = _archive(args.against, Path(tmp)) if args.against else None
        for variant in args.variants.split(","):
            runs: dict[str, list[dict[str, Any]]] = {"new": [], "old": []}
            for _ in range(args.pairs if old_src else 1):
                if old_src is not None:
                    runs["old"].append(_child(old_src, args, variant))
                runs["new"].append(_child(new_src, args, variant))
            entry: dict[str, Any] = {"new": runs["new"]}
            line = f"{variant}: {runs['new'][0]['ops_per_step']:.1f} ops/step"
            line += f" ({runs['new'][0]['all_aten_per_step']:.1f} aten events incl. views)"
            new_s = statistics.median(r["s_per_round"] for r in runs["new"])
            line += f", {new_s:.3f} s/round"
            if old_src is not None:
                old_s = statistics.median(r["s_per_round"] for r in runs["old"])
                ratios = [o["s_per_round"] / n["s_per_round"] for o, n in zip(runs["old"], runs["new"])]
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
