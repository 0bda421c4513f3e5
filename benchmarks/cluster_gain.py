"""What the cluster gain of `synthetic-clusters` is made of: the defaults' learned edge weights
against every edge weighted 1 and against the true clusters' weights (1 within a cluster, a
negligible 1e-6 or 0.3 between clusters), at the `lam` rule's strength and at stronger ones;
validation accuracy (20% of each client's training data), paired differences against local
training, on seeds that the defaults table does not report (never test data).

    PYTHONPATH=src .venv/bin/python benchmarks/cluster_gain.py --out docs/results/defaults/cluster-gain

Writes `cluster-gain.json` (every run's final validation accuracy) and `cluster-gain.md` into `--out`,
and keeps going from what the json already holds (resumable).
"""

from __future__ import annotations

import argparse
import json
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import networkx as nx

import sheaf_fmtl
from sheaf_fmtl.data.synthetic import clusters_groups
from sheaf_fmtl.sheaf.graph import make_graph

PROBLEMS = {
    "synthetic-clusters": {"dataset": "synthetic-clusters"},
    "synthetic-clusters homogeneous": {"dataset": "synthetic-clusters", "data": {"homogeneous": True}},
}
#: name -> (keys, the between-cluster weight of the true clusters' graph or None: the run's own graph)
VARIANTS: dict[str, tuple[dict[str, Any], float | None]] = {
    "local training": ({"algorithm": "local"}, None),
    "the defaults (learned weights)": ({}, None),
    "the defaults, lam 0.3": ({"lam": 0.3}, None),
    "every edge weighted 1": ({"edge_weights": "graph"}, None),
    "true clusters (between 1e-6)": ({"edge_weights": "graph"}, 1e-6),
    "true clusters (between 0.3)": ({"edge_weights": "graph"}, 0.3),
    "true clusters (between 1e-6), lam 0.3": ({"edge_weights": "graph", "lam": 0.3}, 1e-6),
    "true clusters (between 1e-6), lam 1": ({"edge_weights": "graph", "lam": 1.0}, 1e-6),
}
SEEDS = (0, 1, 2, 3, 4, 9, 10, 11, 12, 13)  # the defaults table reports seeds 5-8


def cluster_graph(seed: int, between: float, clients: int = 30) -> nx.Graph:
    """The run's own Erdos-Renyi graph, its edges weighted 1 within a cluster and ``between`` across."""
    drawn, groups = make_graph("erdos-renyi", clients, p=0.2, seed=seed), clusters_groups(clients)
    graph = nx.Graph()
    graph.add_nodes_from(range(clients))
    for i, j in drawn.edges:
        graph.add_edge(int(i), int(j), weight=1.0 if groups[i] == groups[j] else between)
    return graph


def one(task: tuple[str, str, int]) -> tuple[str, float]:
    problem, variant, seed = task
    keys, between = VARIANTS[variant]
    keys = {**PROBLEMS[problem], **keys, "seed": seed, "validation": 0.2}
    if between is not None:
        keys["graph"] = cluster_graph(seed, between)
    return json.dumps([problem, variant, seed]), float(sheaf_fmtl.run(**keys).summary["final"])


def table(done: dict[str, float]) -> str:
    lines = ["| weights | " + " | ".join(PROBLEMS) + " |", "| --- |" + " --- |" * len(PROBLEMS)]
    for v in list(VARIANTS)[1:]:
        cells = []
        for problem in PROBLEMS:
            pairs = [(json.dumps([problem, v, s]), json.dumps([problem, "local training", s])) for s in SEEDS]
            diffs = [100 * (done[a] - done[b]) for a, b in pairs if a in done and b in done]
            if len(diffs) < 2:
                cells.append("-")
                continue
            m = sum(diffs) / len(diffs)
            se = math.sqrt(sum((d - m) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs))
            cells.append(f"{m:+.2f} ± {se:.2f}")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/cluster-gain")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "cluster-gain.json"
    done: dict[str, float] = json.loads(store.read_text()) if store.is_file() else {}
    todo = [(p, v, s) for p in PROBLEMS for v in VARIANTS for s in SEEDS if json.dumps([p, v, s]) not in done]
    with ProcessPoolExecutor(args.workers) as pool:
        for key, final in pool.map(one, todo):
            done[key] = final
            store.write_text(json.dumps(done, indent=0))
    text = f"Validation accuracy, differences paired with local training (points), seeds {list(SEEDS)}.\n\n"
    (out / "cluster-gain.md").write_text(text + table(done))
    print(text + table(done))


if __name__ == "__main__":
    main()
