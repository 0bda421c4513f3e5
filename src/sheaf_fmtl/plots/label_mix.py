"""The label distribution of a federated classification dataset: one bar per client, stacked by
class (each class's training samples), or, beyond :data:`MAX_BARS` clients, a clients x classes
heatmap of each client's class fractions (``sheaf-fmtl data describe NAME --plot FILE``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .style import PALETTE, integer_ticks, paper_style

#: Clients up to which the figure stacks bars; above, a heatmap (bars would be under a pixel wide).
MAX_BARS = 100


def label_counts(labels: list[np.ndarray], num_classes: int) -> np.ndarray:
    """``[clients, num_classes]`` count of each class among each client's labels."""
    return np.stack([np.bincount(y, minlength=num_classes)[:num_classes] for y in labels])


def _class_colors(k: int) -> list[str | tuple[float, ...]]:
    """The palette for up to its length, else a qualitative colour map (``tab10``, ``tab20``)."""
    if k <= len(PALETTE):
        return list(PALETTE[:k])
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20" if k <= 20 else "turbo", k)
    return [tuple(cmap(i)) for i in range(k)]


def label_mix_figure(counts: np.ndarray, title: str) -> Figure:
    """Stacked bars of ``counts`` ``[clients, classes]`` (client ids on x, samples on y, one colour
    per class) or, beyond :data:`MAX_BARS` clients, a heatmap of each client's class fractions."""
    n, k = counts.shape
    with paper_style():
        fig, ax = plt.subplots(figsize=(min(4 + 0.12 * n, 12), 4.2))
        if n <= MAX_BARS:
            bottom = np.zeros(n)
            for c, colour in enumerate(_class_colors(k)):
                ax.bar(np.arange(n), counts[:, c], bottom=bottom, width=0.85, color=colour, label=str(c))
                bottom += counts[:, c]
            ax.set(xlabel="client", ylabel="training samples", xlim=(-0.6, n - 0.4))
            ax.legend(title="class", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
            ax.grid(axis="x", visible=False)
        else:
            share = counts / np.maximum(counts.sum(1, keepdims=True), 1)
            mesh = ax.pcolormesh(np.arange(n + 1) - 0.5, np.arange(k + 1) - 0.5, share.T, cmap="viridis")
            fig.colorbar(mesh, ax=ax, label="fraction of the client's samples")
            ax.set(xlabel="client", ylabel="class")
            ax.grid(False)
            integer_ticks(ax, "y")
        integer_ticks(ax, "x")
        ax.set_title(title)
    return fig
