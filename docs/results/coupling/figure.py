"""Figure of "Which coupling works" (docs/results/notes/coupling.md): test metric against the bits the whole
network transmitted, mean over the 5 test-split seeds of each row (metrics.csv every 50 rounds).

    .venv/bin/python docs/results/coupling/figure.py [ROOT] [OUT.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROWS = [
    ("dfedu", "dFedU", "C1", "-"),
    ("dpsgd", "D-PSGD", "C4", "-"),
    ("learned", "learned maps (the paper's)", "C7", "-"),
    ("fixed", "fixed shared maps", "C5", "-"),
    ("fixed-wide", "fixed shared maps, lam 10 (wider grid)", "C5", "--"),
    ("redrawn-selection", "redrawn, selection", "C2", "-"),
    ("redrawn-selection-est", "redrawn, selection + estimates", "C2", "--"),
    ("redrawn-orthonormal", "redrawn, orthonormal", "C3", "-"),
    ("redrawn-gaussian", "redrawn, gaussian", "C9", "-"),
]


def curve(folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    runs = sorted(folder.glob("seed*/metrics.csv"))
    if not runs:
        return None
    frames = [np.genfromtxt(r, delimiter=",", names=True) for r in runs]
    col = [c for c in frames[0].dtype.names if c.startswith("test_")][0]
    n = min(len(f) for f in frames)
    bits = np.mean([f["transmitted_bits"][:n] for f in frames], axis=0)
    vals = np.mean([f[col][:n] for f in frames], axis=0)
    scale = 100.0 if col == "test_accuracy" else 1.0
    return bits[1:], vals[1:] * scale  # round 0 sends nothing (log axis)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/coupling")
    out = Path(sys.argv[2] if len(sys.argv) > 2 else root / "coupling-metric-vs-bits.png")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, (ds, ylabel) in zip(
        axes, [("school", "test MSE (lower is better)"), ("vehicle", "test accuracy %")], strict=True
    ):
        local = root / ds / "seeds" / "local"
        if (local / "aggregate.json").exists():
            v = curve(local)
            if v is not None:
                ax.axhline(v[1][-1], color="C0", ls=":", label="local training (sends nothing), final")
        for row, name, color, ls in ROWS:
            c = curve(root / ds / "seeds" / row)
            if c is not None:
                ax.plot(c[0] / 8e6, c[1], color=color, ls=ls, marker=".", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("MB transmitted by the whole network (log scale)")
        ax.set_ylabel(ylabel)
        ax.set_title(
            f"{'School' if ds == 'school' else 'Vehicle subset'}: gamma 0.1, every 50 rounds to 500, 5 seeds"
        )
        ax.grid(alpha=0.3)
        if ds == "school":
            ax.set_ylim(105, 160)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"figure: {out}")


if __name__ == "__main__":
    main()
