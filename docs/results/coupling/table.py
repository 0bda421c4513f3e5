"""The "Which coupling works" table of docs/results/notes/coupling.md, from docs/results/coupling
(or runs/coupling).

    .venv/bin/python docs/results/coupling/table.py [ROOT]

One row per setting and dataset: the lam and alpha chosen on validation (best.yaml of the row's
sweep; ``fixed-wide``: of the School grid-edge sweep ``sweep-edge/fixed``), the final test metric
over 5 seeds (mean ± standard error, s / sqrt(n)), the bits the whole
network transmitted in the run (mean over seeds), dFedU's bits over the row's (same seeds, so the
same graphs), and the peak resident memory of the process (peak_rss_bytes, mean over seeds).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROWS = [
    ("local", "local training"),
    ("dfedu", "dFedU"),
    ("dpsgd", "D-PSGD"),
    ("learned", "Sheaf-FMTL, learned maps (the paper's Algorithm 1)"),
    ("fixed", "Sheaf-FMTL, fixed shared maps (eta = 0)"),
    ("fixed-wide", "the same, wider lam grid (School)"),
    ("redrawn-selection", "redrawn, selection"),
    ("redrawn-selection-est", "redrawn, selection + estimates"),
    ("redrawn-orthonormal", "redrawn, orthonormal rows"),
    ("redrawn-orthonormal-est", "redrawn, orthonormal + estimates"),
    ("redrawn-gaussian", "redrawn, gaussian rows"),
    ("redrawn-gaussian-est", "redrawn, gaussian + estimates"),
]
DATASETS = [("school", "School (test MSE, lower is better)"), ("vehicle", "Vehicle subset (test accuracy %)")]


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/coupling")
    head = (
        "| dataset | coupling | lam, alpha (validation) | test metric (5 seeds) | bits (MB) | dFedU / bits |"
    )
    print(head + " peak RSS (MB) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for ds, ds_name in DATASETS:
        agg = {}
        for row, _ in ROWS:
            f = root / ds / "seeds" / row / "aggregate.json"
            if f.exists():
                agg[row] = json.loads(f.read_text())
        ref = agg.get("dfedu", {}).get("transmitted_bits", {}).get("mean")
        first = True
        for row, name in ROWS:
            label = ds_name if first else ""
            if row not in agg:
                if row == "fixed-wide":
                    continue
                print(f"| {label} | {name} | not run | | | | |")
                first = False
                continue
            first = False
            a = agg[row]
            sweep = root / ds / ("sweep-edge/fixed" if row == "fixed-wide" else f"sweep/{row}")
            best = yaml.safe_load((sweep / "best.yaml").read_text())
            hp = f"alpha {best['alpha']}" if row in ("local", "dpsgd") else f"{best['lam']}, {best['alpha']}"
            scale = 100.0 if a["metric"] == "accuracy" else 1.0
            m, se, n = a["final"]["mean"] * scale, a["final"]["se"] * scale, a["final"]["n"]
            bits = a["transmitted_bits"]["mean"]
            ratio = "-" if bits == 0 or ref is None else f"{ref / bits:.1f}x"
            rss = a["peak_rss_bytes"]["mean"] / 2**20
            seeds = "" if n == 5 else f" ({n} seeds)"
            metric = f"{m:.2f} ± {se:.2f}{seeds}"
            print(f"| {label} | {name} | {hp} | {metric} | {bits / 8e6:,.1f} | {ratio} | {rss:,.0f} |")


if __name__ == "__main__":
    main()
