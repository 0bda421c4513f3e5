"""The R-MNIST rows of "Which coupling works" (docs/results/notes/coupling.md), from
docs/results/coupling/rmnist.

    .venv/bin/python docs/results/coupling/rmnist_table.py [ROOT]

One seed per row (seed 0). Per row: the final test accuracy (round 200), the mean of the last five
evaluations (rounds 160-200: single evaluations move by about a point from one to the next), the
bits the network transmitted, dFedU's bits over the row's, the peak resident memory of the process
and what the coupling keeps between rounds (``coupling_state_bytes``). A row still running or
stopped is marked with the round it reached.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

ROWS = [
    ("local", "local training"),
    ("dfedu", "dFedU, lam 1"),
    ("redrawn-lam10", "redrawn selections, lam 10 (alpha lam = 1/2; stability_check=false)"),
    ("redrawn-lam4", "redrawn selections, lam 4 (accepted by the start-up check, which refuses lam >= 5)"),
    ("redrawn-est", "redrawn selections + estimates, lam 1"),
]


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/coupling/rmnist")
    runs = {}
    for row, _ in ROWS:
        if (root / row / "summary.json").exists():
            summary = json.loads((root / row / "summary.json").read_text())
            rows = list(csv.DictReader(open(root / row / "metrics.csv")))
            runs[row] = (summary, rows)
    ref = runs["dfedu"][0]["transmitted_bits"] if "dfedu" in runs else None
    print("| coupling | accuracy, round 200 | mean of rounds 160-200 | bits | dFedU / bits | peak RSS (MB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row, name in ROWS:
        if row not in runs:
            continue
        summary, rows = runs[row]
        last = int(rows[-1]["round"])
        acc = [float(r["test_accuracy"]) for r in rows if int(r["round"]) >= 160]
        bits = summary["transmitted_bits"]
        if summary["status"] == "ok" and last == summary["rounds"]:
            final, tail = f"{100 * summary['final']:.2f}", f"{100 * sum(acc) / len(acc):.2f}"
        else:
            final, tail = f"stopped at round {last}: {100 * float(rows[-1]['test_accuracy']):.2f}", "-"
        ratio = f"{ref / bits:.1f}x" if ref and bits else "-"
        rss = summary.get("peak_rss_bytes", 0) / 2**20
        print(f"| {name} | {final} | {tail} | {bits:.3g} | {ratio} | {rss:.0f} |")


if __name__ == "__main__":
    main()
