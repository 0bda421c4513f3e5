"""Heatmap of the restriction map norms ``||P_ij||_F`` (row: client ``i``, the map's owner;
column: neighbour ``j``), pairs without an edge hatched so that they differ from a zero norm."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import BoundaryNorm, Colormap, ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from ..metrics.final import FINAL, read_final
from ..sheaf.graph import half_edge_matrix
from .style import NON_EDGE_HATCH

MAX_LABELLED_IDS = 20  # beyond this, labels at round steps (every id still ticked up to MAX_MINOR_IDS)
MAX_MINOR_IDS = 100
#: Up to this many distinct values, each gets its own colour (a selection's maps: a few norms).
MAX_DISCRETE = 6
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
    """A labelled tick at every client id on both axes of an ``n x n`` heatmap up to
    :data:`MAX_LABELLED_IDS` clients; beyond, labels at round steps (at most 11, apart) and an
    unlabelled tick at every id up to :data:`MAX_MINOR_IDS`."""
    for axis in (ax.xaxis, ax.yaxis):
        if n <= MAX_LABELLED_IDS:
            axis.set_ticks(range(n))
        else:
            axis.set_major_locator(MaxNLocator(nbins=10, integer=True, steps=[1, 2, 5, 10]))
            if n <= MAX_MINOR_IDS:
                axis.set_ticks(range(n), minor=True)
    ax.tick_params(labelsize=8)


@dataclass(frozen=True)
class ColourScale:
    """How a heatmap colours its values: ``constant`` (the one value, drawn in one colour and
    said in the panel: no colour bar), else a colour map and norm, with ``ticks`` at each value
    when there are few (one colour each) and a ``note`` for the colour bar's label."""

    cmap: Colormap
    norm: Normalize
    ticks: np.ndarray | None = None
    constant: float | None = None
    note: str = ""


def colour_scale(values: np.ndarray) -> ColourScale:
    """The colours of ``values`` (masked entries ignored): one value -> ``constant``; at most
    :data:`MAX_DISCRETE` distinct values -> a colour each (``BoundaryNorm`` between them); more ->
    viridis over their own range (not from 0: maps of similar norms would all look alike)."""
    finite = np.ma.masked_invalid(values).compressed()
    viridis = plt.get_cmap("viridis")
    if not len(finite):
        return ColourScale(viridis, Normalize(0.0, 1.0))
    distinct = np.unique(finite)
    if len(distinct) == 1:
        return ColourScale(
            ListedColormap([viridis(0.5)]),
            Normalize(distinct[0] - 1, distinct[0] + 1),
            constant=float(distinct[0]),
        )
    if len(distinct) <= MAX_DISCRETE:
        middles = (distinct[1:] + distinct[:-1]) / 2
        bounds = np.concatenate([[2 * distinct[0] - middles[0]], middles, [2 * distinct[-1] - middles[-1]]])
        cmap = ListedColormap([viridis(t) for t in np.linspace(0.0, 1.0, len(distinct))])
        return ColourScale(
            cmap, BoundaryNorm(bounds, len(distinct)), distinct, note=f"{len(distinct)} values"
        )
    return ColourScale(viridis, Normalize(float(distinct[0]), float(distinct[-1])), note="min to max")


def map_norm_figure(norms: np.ndarray, edges: np.ndarray | None, title: str) -> Figure:
    """``||P_ij||_F`` per ordered pair, coloured by :func:`colour_scale` (maps all of one norm, as
    a proxy's selections, in one colour with that norm said below); pairs that are not edges (the
    diagonal included) are masked and hatched. Without ``edges`` (old checkpoints), zero entries
    are taken as non-edges. Ticks at client ids."""
    n = norms.shape[0]
    edge = adjacency(edges, n) if edges is not None else norms != 0
    values = np.ma.masked_array(norms, mask=~edge)
    scale = colour_scale(values)
    fig, ax = plt.subplots(figsize=(6, 5.2))
    cells = np.arange(n + 1) - 0.5  # cell centres at the client ids
    ax.add_patch(Rectangle((-0.5, -0.5), n, n, lw=0, zorder=0, **NON_EDGE_HATCH))
    mesh = ax.pcolormesh(cells, cells, values, cmap=scale.cmap, norm=scale.norm, zorder=1)
    name = r"$\|P_{ij}\|_F$"
    handles = [
        Patch(
            label="no edge" if edges is not None else "zero norm (no edge list in checkpoint)",
            **NON_EDGE_HATCH,
        )
    ]
    if scale.constant is None:
        label = f"{name} ({scale.note})" if scale.note else name
        fig.colorbar(mesh, ax=ax, label=label, ticks=scale.ticks)
    else:  # nothing to compare: say so instead of a colour bar over one colour
        handles.append(
            Patch(color=scale.cmap(0.5), label=f"every map: {name} = {scale.constant:.3g} (all equal)")
        )
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
    ax.legend(
        handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False, ncol=len(handles)
    )
    fig.tight_layout()
    return fig
