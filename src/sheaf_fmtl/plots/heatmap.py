"""Heatmap of the restriction map norms ``||P_ij||_F`` (row: client ``i``, the map's owner;
column: neighbour ``j``), pairs without an edge hatched so that they differ from a zero norm."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..metrics.final import FINAL, read_final
from ..sheaf.graph import half_edge_matrix
from .style import NON_EDGE_HATCH, integer_ticks

MAX_LABELLED_IDS = 30  # beyond this, client-id ticks at round steps only
#: Clients above which no ``N x N`` heatmap is drawn (its cells would be under a pixel).
MAX_HEATMAP_CLIENTS = 2000


def load_map_norms(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(norms [N, N], edges [E, 2] or None)`` from ``RUN/checkpoint.pt`` (which keeps one norm per
    half-edge; an older one, the ``[N, N]`` matrix); None when the run has no checkpoint, no maps
    (algorithms other than Sheaf-FMTL) or more than :data:`MAX_HEATMAP_CLIENTS` clients."""
    path = Path(run_dir) / FINAL
    if not path.is_file():
        return None
    ckpt = read_final(run_dir, finished=False)  # checked against summary.json's record of it
    norms, edges = ckpt.get("map_norms"), ckpt.get("edges")
    n = len(ckpt.get("thetas") or ())
    if norms is None or n > MAX_HEATMAP_CLIENTS:
        return None
    edges = None if edges is None else np.asarray(edges).reshape(-1, 2)
    if edges is None and np.ndim(norms) != 2:
        return None
    return half_edge_matrix(np.asarray(norms, dtype=float), edges, n), edges  # type: ignore[arg-type]


def adjacency(edges: np.ndarray, n: int) -> np.ndarray:
    """``[n, n]`` boolean adjacency of undirected ``edges`` (``[E, 2]``)."""
    adj = np.zeros((n, n), dtype=bool)
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    adj[e[:, 0], e[:, 1]] = adj[e[:, 1], e[:, 0]] = True
    return adj


def client_ticks(ax: Axes, n: int) -> None:
    """Ticks at every client id on both axes of an ``n x n`` heatmap, or at round steps beyond
    :data:`MAX_LABELLED_IDS` clients."""
    if n <= MAX_LABELLED_IDS:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.tick_params(labelsize=7 if n > 15 else 9)
    else:
        integer_ticks(ax, "x")
        integer_ticks(ax, "y")


def map_norm_figure(norms: np.ndarray, edges: np.ndarray | None, title: str) -> Figure:
    """``||P_ij||_F`` per ordered pair, colour from 0 (a zero map) up; pairs that are not edges
    (the diagonal included) are masked and hatched. Without ``edges`` (old checkpoints), zero
    entries are taken as non-edges. Ticks at client ids."""
    n = norms.shape[0]
    edge = adjacency(edges, n) if edges is not None else norms != 0
    values = np.ma.masked_array(norms, mask=~edge)
    fig, ax = plt.subplots(figsize=(6, 5.2))
    cells = np.arange(n + 1) - 0.5  # cell centres at the client ids
    ax.add_patch(Rectangle((-0.5, -0.5), n, n, lw=0, zorder=0, **NON_EDGE_HATCH))
    mesh = ax.pcolormesh(cells, cells, values, cmap="viridis", vmin=0, zorder=1)
    fig.colorbar(mesh, ax=ax, label=r"$\|P_{ij}\|_F$")
    ax.set(
        xlim=(-0.5, n - 0.5),
        ylim=(n - 0.5, -0.5),
        aspect="equal",
        xlabel="neighbour j",
        ylabel="client i (owner of $P_{ij}$)",
        title=title,
    )
    ax.grid(False)
    client_ticks(ax, n)
    none = "no edge" if edges is not None else "zero norm (no edge list in checkpoint)"
    ax.legend(
        handles=[Patch(label=none, **NON_EDGE_HATCH)],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        frameon=False,
    )
    fig.tight_layout()
    return fig
