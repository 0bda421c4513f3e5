"""The scaling plot (``scaling.png``): round time against map volume, its linear fits, the floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .scaling import linear_fit


def plot_scaling(points: list[dict[str, Any]], bandwidth: float, path: Path) -> dict[str, dict[str, float]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fits = {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, sweep, key, label in (
        (axes[0], "edges", "edges", "undirected edges |E|"),
        (axes[1], "map_size", "map_elements_per_half_edge", "map size d_ij * d_i (elements)"),
    ):
        pts = [p for p in points if p["sweep"] == sweep]
        x = [float(p[key]) for p in pts]
        y = [p["s_per_round"] for p in pts]
        fit = linear_fit(x, y)
        fits[sweep] = fit
        xs = np.linspace(0, max(x) * 1.05, 50)
        ax.plot(x, y, "o", label="sim.step()")
        ax.plot(
            xs,
            fit["intercept"] + fit["slope"] * xs,
            "-",
            label=f"fit: {fit['intercept'] * 1e3:.1f} ms + {fit['slope']:.3g} s/unit (R²={fit['r2']:.3f})",
        )
        ax.plot(x, [2 * p["map_bytes"] / bandwidth for p in pts], "k--", label="floor 2·bytes(P)/BW")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds per round")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Sheaf-FMTL round time vs map volume")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fits
