"""The edge weights a run learned (``edge_weights = relatedness``): a heatmap of the last round's
``a_ij`` and their curves over rounds. Where the clients' groups are known (``synthetic-clusters``:
contiguous blocks of clients), the heatmap draws the blocks and the curves split the edges into
those within a group and those between groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from ..data.synthetic import CLUSTERS_DEFAULTS, clusters_groups
from ..metrics.final import FINAL, read_final
from ..sheaf.graph import half_edge_matrix
from .heatmap import MAX_HEATMAP_CLIENTS, adjacency, client_ticks
from .style import NON_EDGE_HATCH


def load_edge_weights(run_dir: str | Path) -> dict[str, np.ndarray] | None:
    """``{"final": [N, N], "history": [K, E], "rounds": [K], "edges": [E, 2]}`` from
    ``RUN/checkpoint.pt`` (``final`` kept there per half-edge, or ``[N, N]`` by older runs), or
    ``None`` when the run learned no edge weights or has more than ``MAX_HEATMAP_CLIENTS`` clients."""
    path = Path(run_dir) / FINAL
    if not path.is_file():
        return None
    ckpt = read_final(run_dir, finished=False)  # checked against summary.json's record of it
    n = len(ckpt.get("thetas") or ())
    if ckpt.get("edge_weights") is None or n > MAX_HEATMAP_CLIENTS:
        return None
    edges = np.asarray(ckpt["edges"]).reshape(-1, 2)
    history = ckpt.get("edge_weight_history")
    return {
        "final": half_edge_matrix(np.asarray(ckpt["edge_weights"], dtype=float), edges, n),
        "history": np.zeros((0, len(edges))) if history is None else np.asarray(history, dtype=float),
        "rounds": np.asarray(ckpt.get("edge_weight_rounds", ()), dtype=int),
        "edges": edges,
    }


def client_groups(config: dict[str, Any], n: int) -> np.ndarray | None:
    """Each client's group where the problem defines one (``synthetic-clusters``), else ``None``."""
    if config.get("dataset") != "synthetic-clusters":
        return None
    groups = int((config.get("data") or {}).get("groups", CLUSTERS_DEFAULTS["groups"]))
    return np.asarray(clusters_groups(n, groups))


def separation(final: np.ndarray, edges: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    """How well edge weights ``final [N, N]`` recover known groups: the mean weight of the edges
    within a group and between groups, and the probability that a within-group edge weighs more
    than a between-group one (ties count half: the area under the ROC curve; 0.5 is chance, 1 a
    perfect separation). ``nan`` where either kind of edge is missing."""
    w = final[edges[:, 0], edges[:, 1]]
    same = groups[edges[:, 0]] == groups[edges[:, 1]]
    inside, across = w[same], w[~same]
    if not len(inside) or not len(across):
        nan = float("nan")
        return {"within": float(inside.mean()) if len(inside) else nan, "between": nan, "auc": nan}
    greater = (inside[:, None] > across[None, :]).mean() + 0.5 * (inside[:, None] == across[None, :]).mean()
    return {"within": float(inside.mean()), "between": float(across.mean()), "auc": float(greater)}


def edge_weight_figure(
    weights: dict[str, np.ndarray], groups: np.ndarray | None, title: str, last_round: int | None = None
) -> Figure:
    """Left: ``a_ij`` of the last round per pair (non-edges hatched; group blocks outlined).
    Right: the weights over rounds (mean within groups and between them, or the mean and the
    10-90% band of every edge), as steps: a weight holds from its exchange to the next, and the
    last one to ``last_round``, the run's last round. With groups, the heatmap's title gives their
    :func:`separation`; without a history (a rival's graph saved once), the right panel is left out."""
    final, edges = weights["final"], weights["edges"]
    fig, (ax, cx) = plt.subplots(1, 2, figsize=(11, 4.8), gridspec_kw={"width_ratios": [1.1, 1]})
    _heatmap(fig, ax, final, edges, groups)
    rounds, per_edge = weights["rounds"], weights["history"]  # [K, E], in the order of ``edges``
    if not len(per_edge):  # weights saved once, without their rounds
        cx.remove()
    else:
        _over_rounds(cx, rounds, per_edge, edges, groups, last_round)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _heatmap(fig: Figure, ax: Axes, final: np.ndarray, edges: np.ndarray, groups: np.ndarray | None) -> None:
    """The last round's ``a_ij`` per pair on ``ax``: non-edges hatched; with ``groups``, their
    blocks outlined and their :func:`separation` in the title."""
    n = final.shape[0]
    edge = adjacency(edges, n)
    cells = np.arange(n + 1) - 0.5
    ax.add_patch(Rectangle((-0.5, -0.5), n, n, lw=0, zorder=0, **NON_EDGE_HATCH))
    mesh = ax.pcolormesh(cells, cells, np.ma.masked_array(final, mask=~edge), cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label=r"edge weight $a_{ij}$")
    ax.set(xlim=(-0.5, n - 0.5), ylim=(n - 0.5, -0.5), aspect="equal", xlabel="client j", ylabel="client i")
    ax.grid(False)
    if groups is not None:
        sep = separation(final, edges, groups)
        ax.set_title(
            f"mean weight within groups {sep['within']:.2f}, between {sep['between']:.2f};\n"
            f"P(within > between) = {sep['auc']:.2f} (0.5: chance)",
            fontsize="medium",
        )
        for g in np.unique(groups):
            members = np.flatnonzero(groups == g)
            lo, size = members.min() - 0.5, len(members)
            ax.add_patch(Rectangle((lo, lo), size, size, fill=False, ec="white", lw=1.5, zorder=3))
    client_ticks(ax, n)
    handles = [Patch(label="no edge", **NON_EDGE_HATCH)]
    if groups is not None:
        handles.append(Patch(fill=False, ec="black", label="a group of related clients"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False, ncol=2)


def _over_rounds(
    cx: Axes,
    rounds: np.ndarray,
    per_edge: np.ndarray,
    edges: np.ndarray,
    groups: np.ndarray | None,
    last_round: int | None,
) -> None:
    """The weights ``per_edge [K, E]`` over ``rounds`` on ``cx``, as steps held to ``last_round``:
    the means within groups and between them, or the mean and the 10-90% band of every edge."""
    if last_round is not None and last_round > rounds[-1]:  # the last exchange's weights hold to the end
        rounds, per_edge = np.append(rounds, last_round), np.vstack([per_edge, per_edge[-1:]])
    if groups is not None:
        same = groups[edges[:, 0]] == groups[edges[:, 1]]
        for mask, label in ((same, "within a group"), (~same, "between groups")):
            if mask.any():
                mean = per_edge[:, mask].mean(1)
                cx.plot(rounds, mean, drawstyle="steps-post", label=f"{label} ({int(mask.sum())} edges)")
    else:
        cx.plot(
            rounds, per_edge.mean(1), drawstyle="steps-post", label=f"mean over {per_edge.shape[1]} edges"
        )
        low, high = np.quantile(per_edge, [0.1, 0.9], axis=1)
        cx.fill_between(rounds, low, high, step="post", alpha=0.25, label="10-90% of the edges")
    cx.set(xlabel="round", ylabel=r"edge weight $a_{ij}$", ylim=(-0.02, 1.02), title="over rounds")
    cx.set_xlim(rounds[0], max(rounds[-1], rounds[0] + 1))
    cx.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))  # labels apart at any length
    cx.legend(frameon=False)
