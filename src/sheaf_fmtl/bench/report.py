"""A bench run's summary numbers (floor, ratios ``R``, ``S``, ``M``; defined in :mod:`.harness`),
the ratios against the performance targets (``ratios.json``) and the printed report."""

from __future__ import annotations

from typing import Any

from ..federation import GROUP_CLIENTS

GiB = float(1 << 30)


def summarize(r: dict[str, Any], bandwidth: float) -> dict[str, float]:
    """Floor, ratios and peak memory of one setting's result ``r`` at copy bandwidth ``bandwidth``
    (bytes/s); a device's peak allocation replaces the RSS growth when there is one."""
    maps = r["bytes"]["maps"]
    floor = 2 * maps / bandwidth
    peak = r.get("peak_device_bytes", r["peak_rss"] - r["rss_after_imports"])
    round_s = r["gradients_s"] + r["map_work_s"]  # folds amortised (a median of sim.step() may skip them)
    return {
        "floor_s": floor,
        "floor_ratio": r["map_work_s"] / floor,  # the target: map work within 2x of the floor
        "round_s": round_s,
        "round_floor_ratio": round_s / floor,
        "speedup": r["reference"]["s_per_round"] / round_s,
        "memory_ratio": peak / r["bytes"]["total"],
        "peak_bytes": peak,
        "memory_ratio_raw": r["peak_rss"] / r["bytes"]["total"],
    }


def format_gib(n: float) -> str:
    """``n`` bytes in GiB: three decimals below 10 GiB, one above."""
    return f"{n / GiB:.3f}" if n < 10 * GiB else f"{n / GiB:.1f}"


def cohort_lines(c: dict[str, Any]) -> list[str]:
    """The report's lines for one cohort benchmark result (and its roofline when there is one)."""
    model = c.get("model", "cnn")
    sizes = c.get("cohort_sizes", [c["clients"]])
    who = f"{c['clients']} {model} clients"
    if len(sizes) > 1:
        who = f"{c['clients']} clients ({model}: cohorts of {sizes})"
    lines = [
        f"cohort: {who} (d={c['dim']}), batch {c['batch_size']}: batched "
        f"Cohort.gradients {c['vmap_s'] * 1e3:.1f} ms vs per-client autograd loop {c['loop_s'] * 1e3:.1f} ms"
        f" -> speed-up {c['speedup']:.1f}x (max rel diff {c['max_rel_diff']:.1e})"
    ]
    if "roofline" in c:
        roof = c["roofline"]
        group = c.get("group", [GROUP_CLIENTS])[0]
        lines.append(
            f"cohort roofline ({model}): {roof['gradient_gflop']:.1f} GFLOP per call; the loop runs at "
            f"{roof['loop_gflops']:.0f} GFLOP/s, a GEMM of the largest layer's shape at "
            f"{roof['gemm_gflops']:.0f} GFLOP/s -> no batching can beat the loop by more than "
            f"{roof['best_speedup']:.1f}x here; at the rate of its batched forward/backward products "
            f"({roof['bmm_gflops']:.0f} GFLOP/s, {group} clients per bmm) by more than "
            f"{roof['bmm_speedup']:.1f}x"
        )
    return lines


TARGETS = {"floor_ratio": ("<=", 1.5), "speedup": (">=", 50.0), "cohort_speedup": (">=", 5.0)}


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Every ratio of a bench run with the numbers behind it and whether it meets its target
    (``ratios.json``)."""

    def verdict(key: str, value: float) -> bool:
        op, bound = TARGETS[key]
        return value <= bound if op == "<=" else value >= bound

    out: dict[str, Any] = {
        "device": results["device"],
        "gpu": results["machine"].get("gpu"),
        "bandwidth_GBps": results["bandwidth_bytes_per_s"] / 1e9,
        "targets": {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()},
        "settings": {},
        "cohorts": {},
    }
    for name, r in results["settings"].items():
        m = r["summary"]
        out["settings"][name] = {
            "maps_GiB": r["bytes"]["maps"] / GiB,
            "map_dtype": r["setting"]["map_dtype"],
            "floor_s": m["floor_s"],
            "map_work_s": r["map_work_s"],
            "floor_ratio": m["floor_ratio"],
            "floor_ratio_ok": verdict("floor_ratio", m["floor_ratio"]),
            "gradients_s": r["gradients_s"],
            "round_s": m["round_s"],
            "median_step_s": r["s_per_round"],
            "reference_s": r["reference"]["s_per_round"],
            "reference_subset": r["reference"]["subset"],
            "speedup": m["speedup"],
            "speedup_ok": verdict("speedup", m["speedup"]),
            "memory_ratio": m["memory_ratio"],
            "build_s": r["build_s"],
        }
    mk = results.get("map_kernels")
    if mk:
        bw = results["bandwidth_bytes_per_s"] / 1e9
        out["map_kernels"] = {
            name: {"GBps": f["GBps"], "of_copy_bandwidth": f["GBps"] / bw} for name, f in mk["forms"].items()
        }
    for model, c in results.get("cohorts", {}).items():
        out["cohorts"][model] = {
            "batched_s": c["vmap_s"],
            "loop_s": c["loop_s"],
            "speedup": c["speedup"],
            "speedup_ok": verdict("cohort_speedup", c["speedup"]),
            "max_rel_diff": c["max_rel_diff"],
            **({"roofline_best_speedup": c["roofline"]["best_speedup"]} if "roofline" in c else {}),
        }
    return out


def report(results: dict[str, Any]) -> str:
    """The printed report of a bench run: machine, table of settings, notes, cohorts, scaling fits."""
    lines = _header_lines(results)
    lines += [_setting_row(name, r) for name, r in results["settings"].items()]
    for name, r in results["settings"].items():
        lines += _setting_notes(name, r)
    lines.append("")
    cohorts = results.get("cohorts") or ({"cnn": results["cohort"]} if "cohort" in results else {})
    for c in cohorts.values():
        lines += cohort_lines(c)
    for sweep, fit in results.get("scaling_fits", {}).items():
        lines.append(
            f"scaling vs {sweep}: t = {fit['intercept'] * 1e3:.2f} ms + {fit['slope']:.3g} s/unit, "
            f"R^2 = {fit['r2']:.3f}"
        )
    lines.append("")
    for name, r in results["settings"].items():
        m = r["summary"]
        lines.append(
            f"{name}: floor ratio {m['floor_ratio']:.2f}, speed-up {m['speedup']:.1f}, "
            f"memory ratio {m['memory_ratio']:.2f}"
        )
    mk = results.get("map_kernels")
    if mk:
        lines.append(
            f"map products on {mk['shape']} float32 maps ({format_gib(mk['bytes'])} GiB), bytes moved / s:"
        )
        lines += [f"  {name:<34} {f['GBps']:8.1f} GB/s" for name, f in mk["forms"].items()]
    for what, why in results.get("failed", {}).items():
        lines.append(f"FAILED {what}: {why}")
    return "\n".join(lines)


def _header_lines(results: dict[str, Any]) -> list[str]:
    """The report's first lines: kernel, machine, bandwidth and load, and the settings' table head."""
    bw = results["bandwidth_bytes_per_s"]
    return [
        f"kernel: commit {results['kernel'].get('commit', '?')[:12]} "
        f"(sheaf_fmtl.py+ops.py sha256 {results['kernel']['kernel_sha256']}"
        f"{', uncommitted changes' if results['kernel'].get('kernel_files_dirty') else ''}); "
        f"machine: {results['machine'].get('cpu', '?')}, {results['machine']['cpus']} cpus, "
        f"{results['machine'].get('ram_gib', '?')} GiB; device {results['device']}",
        f"copy bandwidth (2*bytes/t, read+write; faster of start and end): {bw / 1e9:.1f} GB/s; torch "
        f"threads {results['machine']['threads']}; "
        f"load average at start {results['load_average_start'][0]:.1f}, "
        f"at end {results['load_average_end'][0]:.1f} (other processes share the cores when above 0)",
        "",
        f"{'setting':<12} {'|E|':>4} {'d_i':>7} {'d_ij':>5} {'maps GiB':>9} {'floor s':>8} {'map s':>8} "
        f"{'R':>6} {'s/round':>8} {'ref s/rnd':>9} {'S':>6} {'peak GiB':>9} {'bound GiB':>9} {'M':>5}",
    ]


def _setting_row(name: str, r: dict[str, Any]) -> str:
    """Setting ``name``'s row of the table (columns of :func:`_header_lines`)."""
    m = r["summary"]
    return (
        f"{name:<12} {r['num_edges']:>4} {','.join(map(str, r['node_dims'])):>7} "
        f"{','.join(map(str, r['edge_dims'])):>5} {format_gib(r['bytes']['maps']):>9} "
        f"{m['floor_s']:>8.4f} "
        f"{r['map_work_s']:>8.4f} {m['floor_ratio']:>6.2f} {m['round_s']:>8.4f} "
        f"{r['reference']['s_per_round']:>9.4f} "
        f"{m['speedup']:>6.1f} {format_gib(m['peak_bytes']):>9} {format_gib(r['bytes']['total']):>9} "
        f"{m['memory_ratio']:>5.2f}"
    )


def _setting_notes(name: str, r: dict[str, Any]) -> list[str]:
    """The lines under the table on setting ``name``: a loop reference timed on a subset of the
    edges, what a round and the loop reference spent their time on, and the peak memory."""
    lines = []
    ref_ = r["reference"]
    if ref_["subset"]:
        lines.append(
            f"note: {name}: the loop reference was timed on {ref_['edges_timed']} of "
            f"{ref_['edges_total']} edges ({format_gib(ref_['map_bytes_timed'])} GiB of maps; "
            f"all maps twice would not fit) and its edge time scaled by {ref_['edge_scale']:.2f} "
            "(map bytes)"
        )
    m = r["summary"]
    lines.append(
        f"      {name}: round = {r['gradients_s']:.4f} s local gradients + {r['map_work_s']:.4f} s "
        f"map work (sheaf term, messages, exchanges, map step and folds; gradients frozen) = "
        f"{m['round_floor_ratio']:.2f} x floor; median sim.step() {r['s_per_round']:.4f} s"
    )
    lines.append(
        f"      {name}: loop reference = {ref_['gradient_s']:.4f} s per-client autograd gradients + "
        f"{ref_['edge_s']:.4f} s per-edge loop; peak RSS {format_gib(r['peak_rss'])} GiB incl. "
        f"{format_gib(r['rss_after_imports'])} GiB interpreter+torch (M excludes it)"
    )
    return lines
