"""How well each method's collaboration weights recover the clusters of `synthetic-clusters`
(every feature seen, so that one model size lets the rivals run): the mean weight of the half-edges
within a cluster and between clusters, and P(within > between) (0.5: chance), for the defaults'
learned edge weights, pFedGraph's similarity weights and DPFL's chosen collaborators, with the
final test accuracy beside them; every other key at its default.

    PYTHONPATH=src .venv/bin/python benchmarks/weights_separation.py --out DIR [--seeds 5 6 7 8]

Writes `separation.json` and `separation.md` into `--out` (resumable).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import sheaf_fmtl
from sheaf_fmtl.plots.edge_weights import client_groups, load_edge_weights, separation

PROBLEM = {"dataset": "synthetic-clusters", "data": {"homogeneous": True}}
METHODS = {"the defaults (learned weights)": "sheaf-fmtl", "pFedGraph": "pfedgraph", "DPFL": "dpfl"}


def one(algorithm: str, seed: int, folder: Path) -> dict[str, float]:
    """One run's separation over both half-edges of every edge, and its final metric."""
    result = sheaf_fmtl.run(**PROBLEM, algorithm=algorithm, seed=seed, out=folder, overwrite=True)
    weights = load_edge_weights(folder)
    if weights is None:
        raise SystemExit(f"{algorithm} saved no edge weights in {folder}/checkpoint.pt")
    edges = weights["edges"]
    both = np.concatenate([edges, edges[:, ::-1]])  # i -> j and j -> i (DPFL's are directed)
    groups = client_groups({**PROBLEM}, weights["final"].shape[0])
    assert groups is not None
    return {**separation(weights["final"], both, groups), "final": float(result.summary["final"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/weights-separation")
    parser.add_argument("--seeds", nargs="*", type=int, default=[5, 6, 7, 8])
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "separation.json"
    done = json.loads(store.read_text()) if store.is_file() else {}
    for algorithm in METHODS.values():
        for seed in args.seeds:
            key = f"{algorithm}-{seed}"
            if key not in done:
                done[key] = one(algorithm, seed, out / "runs" / key)
                store.write_text(json.dumps(done, indent=1))
    lines = [
        "| weights | within | between | P(within > between) | test accuracy (%) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, algorithm in METHODS.items():
        rows = [done[f"{algorithm}-{s}"] for s in args.seeds]
        mean = {k: float(np.mean([r[k] for r in rows])) for k in ("within", "between", "auc", "final")}
        lines.append(
            f"| {name} | {mean['within']:.2f} | {mean['between']:.2f} | {mean['auc']:.2f} | "
            f"{100 * mean['final']:.2f} |"
        )
    text = f"synthetic-clusters, every feature seen; means over seeds {args.seeds}.\n\n"
    text += "\n".join(lines) + "\n"
    (out / "separation.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
