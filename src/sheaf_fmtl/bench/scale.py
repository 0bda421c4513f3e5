"""``sheaf-fmtl bench scale``: the default Sheaf-FMTL from 100 to 100,000 clients (mean degree 8),
each point in a fresh process (:mod:`.scale_worker`): seconds per client-round, start-up and peak
memory against linear growth from the reference point (1,000 clients), and memory against its
floor. Points are saved as they finish (``scale.json``) and a rerun keeps the finished ones."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import progress

SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (100, 1_000, 4_000)
REFERENCE = 1_000
OUTPUTS = ("scale.json", "scale.png")


def point_key(p: dict[str, Any]) -> tuple[str, int, int, float]:
    return (p["problem"], int(p["clients"]), int(p["rounds"]), float(p["degree"]))


def run_point(args: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One point in a subprocess; a point that fails (memory, time) is recorded with why."""
    cmd = [sys.executable, "-m", "sheaf_fmtl.bench.scale_worker", json.dumps(args)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**args, "failed": f"not finished in {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {**args, "failed": f"exit status {done.returncode}: {tail}"}
    return {**args, **json.loads(done.stdout.strip().splitlines()[-1])}


def summarise(p: dict[str, Any]) -> dict[str, Any]:
    """Per point: seconds per client-round (median round), memory above the interpreter and its
    ratio to the floor."""
    if "failed" in p:
        return p
    rounds = p["round_seconds"][1:] or p["round_seconds"]  # the first round warms caches up
    per_round = statistics.median(rounds)
    used = p["peak_rss_bytes"] - p["interpreter_rss_bytes"]
    floor = sum(p["floor_bytes"].values())
    return {
        **p,
        "seconds_per_round": per_round,
        "seconds_per_client_round": per_round / p["clients"],
        "memory_bytes": used,
        "memory_over_floor": used / floor,
    }


def ratios(points: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per problem, the largest point against :data:`REFERENCE` clients: per client-round cost,
    start-up and memory, each divided by the growth in clients (1 = linear)."""
    out: dict[str, dict[str, float]] = {}
    for problem in sorted({p["problem"] for p in points}):
        done = {p["clients"]: p for p in points if p["problem"] == problem and "failed" not in p}
        if REFERENCE not in done or max(done) == REFERENCE:
            continue
        ref, big = done[REFERENCE], done[max(done)]
        growth = big["clients"] / REFERENCE
        out[problem] = {
            "clients": big["clients"],
            "per_client_round": big["seconds_per_client_round"] / ref["seconds_per_client_round"],
            "startup_over_linear": big["startup_seconds"] / ref["startup_seconds"] / growth,
            "memory_over_linear": big["memory_bytes"] / ref["memory_bytes"] / growth,
            "memory_over_floor": big["memory_over_floor"],
        }
    return out


def run_scale(
    out: Path,
    problems: tuple[str, ...],
    sizes: tuple[int, ...],
    rounds: int,
    degree: float,
    timeout: float,
) -> dict[str, Any]:
    """Every (problem, size) point not in ``out/scale.json`` yet, then the figure."""
    path = out / "scale.json"
    kept = json.loads(path.read_text())["points"] if path.is_file() else []
    points = {point_key(p): p for p in kept if "failed" not in p}
    for problem in problems:
        for n in sizes:
            args = {"problem": problem, "clients": n, "rounds": rounds, "degree": degree}
            if point_key(args) in points:
                continue
            progress.note(f"bench scale: {problem}, {n:,} clients ...")
            points[point_key(args)] = summarise(run_point(args, timeout))
            result = {"points": list(points.values()), "ratios": ratios(list(points.values()))}
            path.write_text(json.dumps(result, indent=1) + "\n")
    finished = sorted(points.values(), key=point_key)
    result = {"points": finished, "ratios": ratios(finished)}
    path.write_text(json.dumps(result, indent=1) + "\n")
    from .scale_plot import plot_scale

    plot_scale(finished, out / "scale.png", REFERENCE)
    return result


def report(result: dict[str, Any]) -> str:
    """The table printed at the end (one line a point, then the ratios)."""
    head = ("problem", "clients", "start-up s", "ms/client-round", "peak GB", "x floor")
    lines = ["{:14} {:>8} {:>10} {:>16} {:>8} {:>7}".format(*head)]
    for p in result["points"]:
        if "failed" in p:
            lines.append(f"{p['problem']:14} {p['clients']:>8,} failed: {p['failed']}")
            continue
        lines.append(
            f"{p['problem']:14} {p['clients']:>8,} {p['startup_seconds']:>10.1f} "
            f"{1e3 * p['seconds_per_client_round']:>16.3f} {p['memory_bytes'] / 1e9:>8.2f} "
            f"{p['memory_over_floor']:>7.2f}"
        )
    for problem, r in result["ratios"].items():
        lines.append(
            f"{problem}: {r['clients']:,} against {REFERENCE:,} clients: per client-round x"
            f"{r['per_client_round']:.2f}, start-up x{r['startup_over_linear']:.2f} of linear, "
            f"memory x{r['memory_over_linear']:.2f} of linear, x{r['memory_over_floor']:.2f} of its floor"
        )
    return "\n".join(lines)
