"""Benchmark harness: Sheaf-FMTL rounds against the memory-bandwidth floor.

:func:`run_bench` runs everything and writes ``bench.json``, ``ratios.json`` and ``scaling.png``.
Per setting (:mod:`.settings`), a fresh subprocess (:mod:`.runner`) builds the federation, graph and
:class:`Simulation` and times ``sim.step()`` (whatever kernel the library has), records its peak
RSS, then times the per-edge loop reference (:mod:`sheaf_fmtl.reference.loop`) on the same state
(:mod:`.rounds`). The parent measures the copy bandwidth (:mod:`.measure`), runs the cohort
benchmark (:mod:`.cohort`: ``Cohort.gradients`` vs a per-client autograd loop), the scaling sweep
(:mod:`.scaling`, :mod:`.plot`) and optionally the map-product kernels (:mod:`.map_kernels`), and
formats the report (:mod:`.report`).

Definitions (all printed and written to ``bench.json``):

- bandwidth ``BW = 2 * bytes / t`` of a large tensor copy (bytes read + bytes written per second);
- floor ``= 2 * bytes(all maps) / BW``: every map read and written once per round (Algorithm 1's map
  step ``P_ij <- P_ij - eta lam r_ij theta_i^T``, eq. (19) ``pijaupdate``, touches every entry);
- floor ratio ``R = s/round of the map work (gradients frozen) / floor``;
- speed-up ``S = s/round of the loop reference / s/round of the library (gradients + map work)``;
- memory ratio ``M = (peak RSS - RSS after imports) / (bytes(maps) + bytes(models) + bytes(data))``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .cohort import cohort_benchmark
from .machine import kernel_version, machine
from .map_kernels import map_kernels
from .measure import copy_bandwidth
from .memory_check import check_fits
from .plot import plot_scaling
from .report import format_gib, ratios, report, summarize
from .runner import run_setting_subprocess
from .scaling import scaling_sweep
from .settings import COHORT_CLIENTS, SMOKE, Setting, for_device, settings


def run_bench(
    quick: bool = False,
    device: str = "cpu",
    out: str | Path = "runs/bench",
    setting_list: list[Setting] | None = None,
    cohort_clients: int = COHORT_CLIENTS,
    scaling: bool = True,
    threads: int | None = None,
    smoke: bool = False,
    cohort_models: tuple[str, ...] = ("cnn",),
    map_init_on_device: bool = False,
    keep_going: bool = False,
    kernels: bool = False,
) -> dict[str, Any]:
    """Everything: bandwidth, settings (each in a fresh process), cohorts, scaling; JSON + PNG in ``out``.

    ``smoke``: tiny settings that finish in seconds (tests); ``threads``: torch threads everywhere;
    ``cohort_models``: one cohort benchmark per entry (an architecture or a comma list);
    ``map_init_on_device``: draw the settings' maps on the device (see :class:`Setting`);
    ``keep_going``: a setting or cohort that fails is recorded in ``failed`` and the rest still run;
    ``kernels``: also time the ways to take the map products (:func:`map_kernels`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run_bench(
            quick,
            device,
            out,
            setting_list,
            cohort_clients,
            scaling,
            threads,
            smoke,
            cohort_models,
            map_init_on_device,
            keep_going,
            kernels,
        )
    finally:
        torch.set_num_threads(previous_threads)


@dataclasses.dataclass
class _Results:
    """The results being gathered into ``out/bench.json``, and how a failing part is handled."""

    data: dict[str, Any]
    out: Path
    keep_going: bool

    def attempt(self, what: str, fn: Any) -> Any:
        """``fn()``; with ``keep_going`` a failure is recorded (and printed) instead of raised."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - keep_going: record and continue
            if not self.keep_going:
                raise
            self.data["failed"][what] = f"{type(e).__name__}: {e}"
            print(f"[bench] FAILED {what}: {type(e).__name__}: {e}", file=sys.stderr)
            return None

    def checkpoint(self) -> None:
        """Write what is gathered so far: partial results survive a run that is stopped later."""
        (self.out / "bench.json").write_text(json.dumps(self.data, indent=2, default=str))


def _run_bench(
    quick: bool,
    device: str,
    out: Path,
    setting_list: list[Setting] | None,
    cohort_clients: int,
    scaling: bool,
    threads: int | None,
    smoke: bool,
    cohort_models: tuple[str, ...] = ("cnn",),
    map_init_on_device: bool = False,
    keep_going: bool = False,
    kernels: bool = False,
) -> dict[str, Any]:
    if smoke:
        setting_list = setting_list or SMOKE
        cohort_clients = min(cohort_clients, 4)
    run = _Results(_header(quick, smoke, device), out, keep_going)
    results = run.data
    bw_bytes = (256 << 20) if quick or smoke else (1 << 30)
    bandwidth = copy_bandwidth(bw_bytes, device)
    print(f"[bench] copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write) on {device}", file=sys.stderr)
    results["bandwidth_bytes_per_s"] = bandwidth
    results["bandwidth_tensor_bytes"] = bw_bytes
    if kernels:
        small = {"half_edges": 4, "edge_dim": 32, "node_dim": 4000} if quick or smoke else {}
        results["map_kernels"] = run.attempt("map kernels", lambda: map_kernels(device, **small))
        run.checkpoint()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the settings run in child processes: leave them the memory
    chosen = setting_list if setting_list is not None else settings(quick)
    prepared = [
        for_device(dataclasses.replace(s, map_init_on_device=map_init_on_device), device) for s in chosen
    ]
    _run_settings(run, prepared, device, threads, bandwidth)
    _run_cohorts(run, cohort_models, cohort_clients, 1 if smoke else 7, device)
    if scaling:

        def sweep() -> None:
            results["scaling"] = scaling_sweep(quick or smoke, device, smoke)
            results["scaling_fits"] = plot_scaling(results["scaling"], bandwidth, out / "scaling.png")

        run.attempt("scaling", sweep)
    _finish(results, bandwidth, bw_bytes, device)
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    (out / "ratios.json").write_text(json.dumps(results["ratios"], indent=2))
    return results


def _header(quick: bool, smoke: bool, device: str) -> dict[str, Any]:
    """The first entries of ``bench.json``: the run's options, the machine and its load."""
    return {
        "quick": quick,
        "smoke": smoke,
        "device": device,
        "machine": machine(),
        "kernel": kernel_version(),
        "load_average_start": os.getloadavg(),
        "failed": {},
    }


def _run_settings(
    run: _Results, chosen: list[Setting], device: str, threads: int | None, bandwidth: float
) -> None:
    """Each setting in a fresh process, into ``settings`` with its summary against ``bandwidth``."""
    run.data["settings"] = {}
    for s in chosen:
        print(f"[bench] setting {s.name}: {s.clients} clients, {s.model}, gamma={s.gamma}", file=sys.stderr)
        t0 = time.perf_counter()
        r = run.attempt(f"setting {s.name}", lambda s=s: _fitting_run(s, device, threads))
        if r is None:
            continue
        r["summary"] = m = summarize(r, bandwidth)
        run.data["settings"][s.name] = r
        print(
            f"[bench] setting {s.name} done in {time.perf_counter() - t0:.1f} s: maps "
            f"{format_gib(r['bytes']['maps'])} GiB, floor {m['floor_s']:.4f} s, "
            f"map work {r['map_work_s']:.4f} s "
            f"(R {m['floor_ratio']:.2f}), round {m['round_s']:.4f} s, loop reference "
            f"{r['reference']['s_per_round']:.4f} s (S {m['speedup']:.1f})",
            file=sys.stderr,
        )
        run.checkpoint()


def _run_cohorts(run: _Results, models: tuple[str, ...], clients: int, repeats: int, device: str) -> None:
    """One cohort benchmark per entry of ``models`` into ``cohorts`` (the first also as ``cohort``)."""
    run.data["cohorts"] = {}
    for model in models:
        print(f"[bench] cohort gradients ({model})", file=sys.stderr)
        t0 = time.perf_counter()
        c = run.attempt(
            f"cohort {model}",
            lambda model=model: cohort_benchmark(clients, repeats=repeats, device=device, model=model),
        )
        if c is None:
            continue
        run.data["cohorts"][model] = c
        print(
            f"[bench] cohort {model} done in {time.perf_counter() - t0:.1f} s: speed-up {c['speedup']:.1f}x",
            file=sys.stderr,
        )
        run.checkpoint()
    if run.data["cohorts"]:
        run.data["cohort"] = next(iter(run.data["cohorts"].values()))


def _finish(results: dict[str, Any], bandwidth: float, bw_bytes: int, device: str) -> None:
    """The closing entries: the bandwidth measured again, the summaries against it, the report."""
    # The copy bandwidth is measured again at the end; the floor uses the faster of the two, so that
    # a copy slowed down by a passing load cannot make the floor look easy.
    results["bandwidth_bytes_per_s_end"] = copy_bandwidth(bw_bytes, device)
    results["bandwidth_bytes_per_s"] = max(bandwidth, results["bandwidth_bytes_per_s_end"])
    for r in results["settings"].values():
        r["summary"] = summarize(r, results["bandwidth_bytes_per_s"])
    results["load_average_end"] = os.getloadavg()
    results["report"] = report(results)
    results["ratios"] = ratios(results)


def _fitting_run(s: Setting, device: str, threads: int | None) -> dict[str, Any]:
    """``s`` run in a fresh interpreter once :func:`.memory_check.check_fits` says it fits."""
    check_fits(s, device)
    return run_setting_subprocess(s, device, threads)
