"""One look for every figure: a colour-blind-safe palette (Okabe & Ito 2008), integer round
ticks, fonts embedded as text in PDFs, and PNG + PDF (vector) output."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from cycler import cycler

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402

plt = matplotlib.pyplot  # (the figures' pyplot, with the backend set above; other modules take it from here)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from .. import algorithms  # noqa: E402, F401 - registers the entries that give each algorithm its colour
from ..config.files import replace_file  # noqa: E402
from ..config.registry import algorithm_spec  # noqa: E402

# Okabe-Ito, ordered so that the first colours are far apart also in greyscale (yellow last).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
NON_EDGE_HATCH: dict[str, Any] = {"facecolor": "white", "edgecolor": "0.6", "hatch": "///"}
FORMATS = ("png", "pdf")

RC: dict[str, Any] = {
    "axes.prop_cycle": cycler(color=PALETTE),
    "pdf.fonttype": 42,  # TrueType: text stays text (editable, searchable) in the PDF
    "ps.fonttype": 42,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "savefig.bbox": "tight",
}


@contextmanager
def paper_style() -> Iterator[None]:
    """Matplotlib settings of every figure of this package (restored on exit)."""
    with plt.style.context(RC):
        yield


def algorithm_color(name: str) -> str | None:
    """The colour the algorithm's registry entry gives it, or ``None`` (the palette's cycle)."""
    spec = algorithm_spec(name)
    return PALETTE[spec.color] if spec is not None and spec.color is not None else None


def color(i: int) -> str:
    """The ``i``-th palette colour (cycling)."""
    return PALETTE[i % len(PALETTE)]


def marker(i: int) -> str:
    """The ``i``-th marker (cycling): curves stay apart in greyscale print."""
    return MARKERS[i % len(MARKERS)]


def integer_ticks(ax: Axes, axis: str = "x") -> None:
    """Round numbers only (communication rounds, client ids)."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(integer=True))


#: A legend goes inside its axes (where it covers the fewest points) up to this many entries of at
#: most ``INSIDE_WIDTH`` characters; beyond, below the axes in columns.
INSIDE_ENTRIES, INSIDE_WIDTH = 4, 48
#: Characters of legend text that fit across one panel at the legend's font size.
PANEL_CHARACTERS = 96


def place_legend(ax: Axes) -> None:
    """The axes' legend inside it (``loc="best"``) when it is short, else under the axes in up to
    three columns as wide as the panel: never beside it, where it widened the canvas and left the
    space under it empty."""
    _, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    widest = max(map(len, labels))
    if len(labels) <= INSIDE_ENTRIES and widest <= INSIDE_WIDTH:
        ax.legend(loc="best")
        return
    columns = max(1, min(3, len(labels), PANEL_CHARACTERS // (widest + 6)))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=columns, frameon=False)


def metric_label(metric: str, split: str = "test") -> str:
    """``accuracy`` -> ``test accuracy``, ``mse`` -> ``test MSE``, anything else ``test metric``;
    ``validation accuracy``, ... for a validation split (``split = "validation"``)."""
    return f"{split} " + {"accuracy": "accuracy", "mse": "MSE"}.get(metric, "metric")


def check_formats(formats: Sequence[str]) -> None:
    """Raise ValueError (one line) unless ``formats`` is a non-empty subset of png, pdf, svg."""
    if not formats or any(f not in ("png", "pdf", "svg") for f in formats):
        raise ValueError(f"plot formats must be among png, pdf, svg (got {', '.join(formats) or 'none'})")


def save_figure(fig: Figure, stem: Path, formats: Sequence[str] = FORMATS, dpi: int = 150) -> list[Path]:
    """Write ``stem.png`` / ``stem.pdf`` ... and close the figure. Returns the paths written.
    Saved in :func:`paper_style`, so that its ``savefig`` settings hold (the bounding box of
    everything drawn: a title or a legend beside the axes is never cut off)."""
    check_formats(formats)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        with paper_style():
            replace_file(path, functools.partial(fig.savefig, dpi=dpi, format=fmt))  # never through a link
        paths.append(path)
    plt.close(fig)
    return paths
