"""``scale.png`` of ``sheaf-fmtl bench scale``: milliseconds per client-round, start-up seconds and
peak memory in GB (the units of its table) against the number of clients (log-log), each with the
linear reference through 1,000 clients."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Per panel: the point's key, the axis label (the table's unit), the reference's slope and the
#: factor from the point's unit (seconds, bytes) to the label's.
PANELS = (
    ("seconds_per_client_round", "ms per client-round", 0, 1e3),
    ("startup_seconds", "start-up s (to round 0)", 1, 1.0),
    ("memory_bytes", "peak GB above the interpreter", 1, 1e-9),
)


def plot_scale(points: list[dict[str, Any]], path: Path, reference: int = 1_000) -> None:
    """:func:`scale_figure`, saved as ``path``."""
    import matplotlib.pyplot as plt

    fig = scale_figure(points, reference)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scale_figure(points: list[dict[str, Any]], reference: int = 1_000) -> Figure:
    """One panel per quantity, one line per problem; dashed: ``value(reference) (N / reference)^slope``
    (slope 0 for the per client-round cost, 1 for the totals); dotted in the memory panel: the floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [p for p in points if "failed" not in p]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (key, label, slope, unit) in zip(axes, PANELS, strict=True):
        for problem in sorted({p["problem"] for p in done}):
            pts = sorted((p for p in done if p["problem"] == problem), key=lambda p: p["clients"])
            x = [p["clients"] for p in pts]
            (line,) = ax.plot(x, [unit * p[key] for p in pts], "o-", label=problem)
            ref = next((p for p in pts if p["clients"] == reference), None)
            if ref is not None:
                linear = [unit * ref[key] * (n / reference) ** slope for n in x]
                ax.plot(x, linear, "--", color=line.get_color(), lw=1)
            if key == "memory_bytes":
                floors = [unit * sum(p["floor_bytes"].values()) for p in pts]
                ax.plot(x, floors, ":", color=line.get_color(), lw=1.5)
        ax.set(xscale="log", yscale="log", xlabel="clients N (mean degree 8)", ylabel=label)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8, title="dashed: linear from 1,000\ndotted: memory floor", title_fontsize=7)
    fig.suptitle("Default Sheaf-FMTL at scale (one process, CPU)")
    fig.tight_layout()
    return fig
