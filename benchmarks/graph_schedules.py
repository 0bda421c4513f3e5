"""Graphs that change every round and clients that join late, on School, Vehicle and
synthetic-clusters, with every other key at its default (``maps=auto``, ``lam`` by its rule).

1. ``graph_schedule=random-peers`` (``peers_from=all``) with ``peers`` 1, 2, 4 against the fixed
   Erdos-Renyi graph of mean degree 8 (``graph_degree=8``): the test metric against the bits
   transmitted so far (one curve per setting and seed; a figure per problem), and the metric each
   random-peers setting reaches with a quarter of the fixed graph's final bits.
2. Late joiners: ``join_round=late:K@R`` on the fixed graph (coupled), and the same clients with
   ``algorithm=local`` (alone); each late client's metric by rounds since it joined, against the
   same client in the run where it was there from the start (the fixed-graph run of part 1): the
   rounds each needs to come within 1 point (accuracy) or 1% (MSE) of it.

    SHEAF_FMTL_DATA=DIR PYTHONPATH=src .venv/bin/python benchmarks/graph_schedules.py \\
        --out runs/graph-schedules --docs docs/results/graph-schedules

Resumable: every finished cell is kept in ``OUT/graph_schedules.json`` and skipped when run again.
Writes ``graph_schedules.md`` (the tables) and one ``bits-PROBLEM.png`` per problem into ``--docs``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import sheaf_fmtl

PROBLEMS = ("vehicle", "synthetic-clusters", "school")  # the order they run (School is the slowest)
PEERS = (1, 2, 4)
FIXED = {"graph_degree": 8}
LATE_K, LATE_R = 3, 41  # joining at round 41: evaluated after 5, 10, ... rounds of its own


class PerClient:
    """Records each evaluation's per-client test metric (one extra evaluation per evaluated round)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, list[float | None]]] = []

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: Any) -> None:  # noqa: A002
        if metrics is not None:
            self.rows.append((round, view._sim.evaluate()["per_client"]))


def one(keys: dict[str, Any], per_client: bool) -> dict[str, Any]:
    """One run: its curve (round, bits, mean metric), and per-client curves when asked."""
    recorder = PerClient()
    start = time.time()
    result = sheaf_fmtl.run(**keys, callbacks=[recorder] if per_client else [])
    if result.summary["status"] != "completed":  # stopped by a signal: not a cell's result
        raise SystemExit(f"stopped ({result.summary['status']}); run again to go on")
    column = next(k for k in result.metrics[0] if k.startswith("test_"))
    curve = [(m["round"], m["transmitted_bits"], m[column]) for m in result.metrics]
    out = {
        "curve": curve,
        "higher_is_better": result.summary["higher_is_better"],
        "seconds": time.time() - start,
    }
    out["maps"], out["lam"] = result.summary.get("maps"), result.summary.get("lam")
    if per_client:
        out["per_client"] = recorder.rows
    return out


def cells(seeds: list[int], rounds: int) -> list[tuple[str, dict[str, Any], bool]]:
    """``(tag, keys, per-client curves)`` in the order they run: seed by seed, problem by problem."""
    out = []
    for seed in seeds:
        for name in PROBLEMS:
            base = {"dataset": name, "seed": seed, "rounds": rounds, "eval_every": 5}
            out.append((f"{name}/fixed/{seed}", {**base, **FIXED}, True))
            for p in PEERS:
                keys = {**base, "graph_schedule": "random-peers", "peers_from": "all", "peers": p}
                out.append((f"{name}/peers{p}/{seed}", keys, False))
            late = {**base, **FIXED, "join_round": f"late:{LATE_K}@{LATE_R}"}
            out.append((f"{name}/late-coupled/{seed}", late, True))
            out.append((f"{name}/late-alone/{seed}", {**late, "algorithm": "local"}, True))
    return out


def at_bits(curve: list[list[float]], bits: float) -> float | None:
    """The metric of the last evaluation with at most ``bits`` transmitted."""
    within = [m for _, b, m in curve if b <= bits]
    return within[-1] if within else None


def bits_table(done: dict[str, Any], seeds: list[int]) -> str:
    """Per problem and setting (means over the seeds where every setting finished): the bits and the
    final metric, the fixed graph's metric at the same bits, and the metric at a quarter of the
    fixed graph's final bits."""
    lines = [
        "| problem | setting | MB sent | final | fixed graph at the same MB | at 1/4 of the fixed graph's MB "
        "(minus the fixed graph's final) | seeds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in PROBLEMS:
        tags = ["fixed"] + [f"peers{p}" for p in PEERS]
        ok = [s for s in seeds if all(f"{name}/{t}/{s}" in done for t in tags)]
        if not ok:
            continue
        fixed = [done[f"{name}/fixed/{s}"] for s in ok]
        scale = 100.0 if fixed[0]["higher_is_better"] else 1.0
        f_final = _mean([f["curve"][-1][2] * scale for f in fixed])
        for tag in tags:
            runs = [done[f"{name}/{tag}/{s}"] for s in ok]
            mb = _mean([r["curve"][-1][1] / 8e6 for r in runs])
            final = _mean([r["curve"][-1][2] * scale for r in runs])
            same = [at_bits(f["curve"], r["curve"][-1][1]) for r, f in zip(runs, fixed, strict=True)]
            quarter = [at_bits(r["curve"], f["curve"][-1][1] / 4) for r, f in zip(runs, fixed, strict=True)]
            q = _mean([v * scale for v in quarter if v is not None])
            same_mean = _mean([v * scale for v in same if v is not None])
            setting = "fixed, degree 8" if tag == "fixed" else f"random-peers, peers={tag[5:]}"
            cells = [name, setting, f"{mb:.1f}", f"{final:.2f}", f"{same_mean:.2f}"]
            lines.append("| " + " | ".join(cells) + f" | {q:.2f} ({q - f_final:+.2f}) | {len(ok)} |")
    return "\n".join(lines) + "\n"


def rounds_to_reach(late: dict[str, Any], ref: dict[str, Any], tol: float) -> list[int | None]:
    """For each late client: rounds it took part in (from ``LATE_R`` on) until its metric is within
    ``tol`` (points of accuracy, or a relative ``tol`` % of MSE) of the same client's in the run it was
    there from the start, at the same round (``None``: not within the run)."""
    higher = ref["higher_is_better"]
    refs = {r: v for r, v in ref["per_client"]}
    first = {r: v for r, v in late["per_client"]}
    joined = [i for i, v in enumerate(late["per_client"][0][1]) if v is None]
    out: list[int | None] = []
    for i in joined:
        hit = None
        for r in sorted(first):
            if r < LATE_R or first[r][i] is None or r not in refs:
                continue
            a, b = first[r][i], refs[r][i]
            close = a * 100 >= b * 100 - tol if higher else a <= b * (1 + tol / 100)
            if close:
                hit = r - LATE_R + 1
                break
        out.append(hit)
    return out


def late_table(done: dict[str, Any], seeds: list[int]) -> str:
    lines = [
        "| problem | seed | rounds to within 1 point, coupled (per late client) | alone "
        "| rounds after joining |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in PROBLEMS:
        for s in seeds:
            tags = [f"{name}/{t}/{s}" for t in ("fixed", "late-coupled", "late-alone")]
            if not all(t in done for t in tags):
                continue
            ref, coupled, alone = (done[t] for t in tags)
            a = rounds_to_reach(coupled, ref, 1.0)
            b = rounds_to_reach(alone, ref, 1.0)
            after = ref["curve"][-1][0] - LATE_R + 1
            lines.append(f"| {name} | {s} | {_show(a)} | {_show(b)} | {after} |")
    return "\n".join(lines) + "\n"


def late_curve(done: dict[str, Any], name: str, seed: int) -> str:
    """The late clients' mean metric by rounds since joining: coupled, alone, and the same clients
    in the run they were there from the start (at the same round)."""
    tags = [f"{name}/{t}/{seed}" for t in ("fixed", "late-coupled", "late-alone")]
    if not all(t in done for t in tags):
        return ""
    ref, coupled, alone = (done[t] for t in tags)
    joined = [i for i, v in enumerate(coupled["per_client"][0][1]) if v is None]
    scale = 100.0 if ref["higher_is_better"] else 1.0
    lines = ["| rounds since joining | coupled | alone | from the start |", "| --- | --- | --- | --- |"]
    rows = {r: v for r, v in ref["per_client"]}
    alone_rows = {r: v for r, v in alone["per_client"]}
    for r, v in coupled["per_client"]:
        if r < LATE_R or (r - LATE_R + 1) % 10 or r not in rows or r not in alone_rows:
            continue
        cells = [_mean([x[i] * scale for i in joined]) for x in (v, alone_rows[r], rows[r])]
        lines.append(f"| {r - LATE_R + 1} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return f"{name}, seed {seed}, clients {joined}:\n\n" + "\n".join(lines) + "\n"


def figure(done: dict[str, Any], name: str, seeds: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, tag in enumerate(["fixed"] + [f"peers{p}" for p in PEERS]):
        for s in seeds:
            r = done.get(f"{name}/{tag}/{s}")
            if r is None:
                continue
            scale = 100.0 if r["higher_is_better"] else 1.0
            xs = [b / 8e6 for _, b, _ in r["curve"]]
            ys = [m * scale for _, _, m in r["curve"]]
            label = (
                ("fixed, degree 8" if tag == "fixed" else f"random-peers, peers={tag[5:]}")
                if s == seeds[0]
                else None
            )
            ax.plot(xs, ys, color=f"C{k}", alpha=0.8, label=label)
    ax.set_xlabel("transmitted MB")
    ax.set_ylabel("test accuracy (%)" if name != "school" else "test MSE")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _show(values: list[int | None]) -> str:
    return ", ".join("never" if v is None else str(v) for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/graph-schedules")
    parser.add_argument("--docs", default="docs/results/graph-schedules")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    out, docs = Path(args.out), Path(args.docs)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "graph_schedules.json"
    done: dict[str, Any] = json.loads(store.read_text()) if store.exists() else {}
    for tag, keys, per_client in [] if args.report_only else cells(args.seeds, args.rounds):
        if tag in done:
            continue
        done[tag] = one(keys, per_client)
        store.write_text(json.dumps(done))
        print(f"{tag}: {done[tag]['curve'][-1]} ({done[tag]['seconds']:.0f} s)", flush=True)
    docs.mkdir(parents=True, exist_ok=True)
    text = "# Changing graphs and late joiners: every table\n\n"
    seeds = " ".join(map(str, args.seeds))
    text += f"`benchmarks/graph_schedules.py --seeds {seeds}`, {args.rounds} rounds.\n\n"
    text += "## random-peers against the fixed graph\n\n" + bits_table(done, args.seeds)
    text += "\n## late joiners\n\n" + late_table(done, args.seeds) + "\n"
    text += "\n".join(late_curve(done, n, s) for n in PROBLEMS for s in args.seeds)
    (docs / "graph_schedules.md").write_text(text)
    print(text)
    for name in PROBLEMS:
        figure(done, name, args.seeds, docs / f"bits-{name}.png")


if __name__ == "__main__":
    main()
