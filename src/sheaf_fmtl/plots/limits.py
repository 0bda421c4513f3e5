"""The value axis of a rounds panel, fitted to the curves after their first evaluated round: an
initial model far from the rest (School's MSE at round 0 is several times the trained one's) is
drawn clipped at the axis edge, with its value written there, instead of flattening every curve."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.transforms import blended_transform_factory

#: Padding above and below the curves, as a fraction of their range.
MARGIN = 0.05
#: A first value stays on the axis within this many ranges of the later values (an accuracy
#: climbing from chance stays whole; an initial MSE several times the trained one does not).
REACH = 3.0


def value_limits(
    firsts: Sequence[float], rest: Sequence[float], margin: float = MARGIN
) -> tuple[float, float] | None:
    """``(low, high)`` of the value axis: the range of ``rest`` (every value after each curve's
    first), widened by the ``firsts`` (each curve's first value) lying within :data:`REACH` ranges of it,
    padded by ``margin`` of the range; ``None`` when nothing is finite."""
    later = np.asarray(rest, dtype=float)
    later = later[np.isfinite(later)]
    first = np.asarray(firsts, dtype=float)
    first = first[np.isfinite(first)]
    if not len(later):
        later, first = first, first[:0]
    if not len(later):
        return None
    low, high = float(later.min()), float(later.max())
    span = high - low
    reach = REACH * span if span > 0 else np.inf  # a flat rest gives no scale to call one an outlier
    near = first[(first >= low - reach) & (first <= high + reach)]
    if len(near):
        low, high = min(low, float(near.min())), max(high, float(near.max()))
    span = high - low or abs(high) * 0.1 or 1.0
    return low - margin * span, high + margin * span


def mark_clipped(ax: Axes, firsts: Sequence[tuple[float, float, str]]) -> None:
    """For each first point ``(round, value, colour)`` outside the axis's limits, a triangle on the
    axis edge at its round pointing to it, and the values written beside (``round 0: 580``)."""
    low, high = ax.get_ylim()
    edge = blended_transform_factory(ax.transData, ax.transAxes)
    for side, y, symbol, bound in ((1, 1.0, "\u25b2", high), (-1, 0.0, "\u25bc", low)):
        off = sorted(
            (p for p in firsts if np.isfinite(p[1]) and side * (p[1] - bound) > 0), key=lambda p: -side * p[1]
        )
        if not off:
            continue
        for x, _, colour in off:  # text, not a line: the axes' lines stay the curves
            ax.annotate(symbol, xy=(x, y), xycoords=edge, ha="center", va="center", color=colour, fontsize=9)
        rounds = ", ".join(dict.fromkeys(f"{x:g}" for x, _, _ in off))
        values = ", ".join(f"{v:.3g}" for _, v, _ in off[:3]) + (", ..." if len(off) > 3 else "")
        ax.annotate(
            f"round {rounds}: {values} (off the axis)",
            xy=(off[0][0], y),
            xycoords=edge,
            xytext=(8, -4 * side),
            textcoords="offset points",
            va="top" if side > 0 else "bottom",
            fontsize=7,
        )
