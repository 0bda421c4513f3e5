"""Figures a reader can use: the value axis fitted to the trained curves (not the initial model),
legends that name only what differs and what the runs read, legends that leave no empty canvas,
heatmaps whose colours show the values' structure, titles without folder names, and tick labels
that keep apart."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import BoundaryNorm

from sheaf_fmtl.metrics.final import file_digest
from sheaf_fmtl.plots.edge_weights import edge_weight_figure
from sheaf_fmtl.plots.heatmap import colour_scale, map_norm_figure
from sheaf_fmtl.plots.labels import describe, legend_keys, setting_label, value_text
from sheaf_fmtl.plots.limits import value_limits
from sheaf_fmtl.plots.style import paper_style

from .test_plots import figure_of, legend_texts, make_run


def _shown_labels(axis, renderer):  # noqa: ANN001, ANN202
    lo, hi = sorted(axis.get_view_interval())
    return [
        t.label1.get_window_extent(renderer)
        for t in axis.get_major_ticks()
        if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi
    ]


def _apart(boxes, along: str = "x") -> bool:  # noqa: ANN001
    """No two neighbouring labels overlap (a gap of at least one pixel)."""
    key = (lambda b: b.x0) if along == "x" else (lambda b: b.y0)
    boxes = sorted(boxes, key=key)
    if along == "x":
        return all(b.x0 - a.x1 >= 1 for a, b in zip(boxes, boxes[1:], strict=False))
    return all(b.y0 - a.y1 >= 1 for a, b in zip(boxes, boxes[1:], strict=False))


def test_an_outlying_first_round_leaves_the_axis_to_the_trained_curves() -> None:
    rest = np.linspace(110.0, 146.0, 10)
    low, high = value_limits([580.0], rest)
    assert (low, high) == pytest.approx((110 - 0.05 * 36, 146 + 0.05 * 36))
    # a first value within three ranges of the rest stays on the axis (accuracy climbing from chance)
    assert value_limits([0.51], [0.59, 0.68])[0] == pytest.approx(0.51 - 0.05 * 0.17)
    assert value_limits([0.31], [0.59, 0.68])[0] == pytest.approx(0.59 - 0.05 * 0.09)  # 3.1 ranges off
    # a flat rest gives no scale to call anything an outlier
    assert value_limits([0.5], [0.6]) == pytest.approx((0.5 - 0.005, 0.6 + 0.005))
    assert value_limits([float("nan")], []) is None


def test_school_like_rounds_panels_clip_round_zero_and_say_so(tmp_path) -> None:
    runs = [
        make_run(tmp_path, "a", [580.0, 131.9, 113.8, 112.3], metric="mse", dataset="school"),
        make_run(tmp_path, "b", [578.0, 129.9, 113.1, 110.0], metric="mse", dataset="school", lam=0.1),
    ]
    fig = figure_of(*runs)
    ax_r, ax_b = fig.axes
    for ax in (ax_r, ax_b):
        low, high = ax.get_ylim()
        assert 105 < low < 110 and 131.9 < high < 140
    notes = [t.get_text() for t in ax_r.texts]
    assert any("round 0: 580, 578 (off the axis)" in t for t in notes), notes
    assert [list(line.get_ydata())[0] for line in ax_r.get_lines()] == [580.0, 578.0]  # still drawn
    plt.close(fig)


def test_values_in_legends_have_three_significant_digits() -> None:
    assert [value_text(v) for v in (0.0333333, 0.333333, 0.3625, 0.01, 1e-5, 2, (0.5, 0.125))] == [
        "0.0333",
        "0.333",
        "0.362",
        "0.01",
        "1e-05",
        "2",
        "0.5,0.125",
    ]


def test_legends_skip_keys_the_runs_did_not_read_and_values_left_open(tmp_path) -> None:
    unread = [
        {"algorithm": "sheaf-fmtl", "lam": 0.1, "graph_p": 0.3, "unused": ["graph_p"]},
        {"algorithm": "sheaf-fmtl", "lam": 0.2, "graph_p": 0.5, "unused": ["graph_p"]},
    ]
    assert legend_keys(unread) == ["lam"]
    a = make_run(tmp_path, "a", [0.5, 0.6], lam=0.0333333, data={"homogeneous": None})
    b = make_run(tmp_path, "b", [0.5, 0.7], lam=0.333333, data={"homogeneous": True})
    fig = figure_of(a, b)
    assert legend_texts(fig.axes[1]) == [
        "Sheaf-FMTL, lam=0.0333",
        "Sheaf-FMTL, lam=0.333, data.homogeneous=True",
    ]
    plt.close(fig)
    assert describe({"algorithm": "sheaf-fmtl", "data": {"homogeneous": None}}, ["data.homogeneous"]) == (
        "Sheaf-FMTL"
    )


def _extent(fig, artist):  # noqa: ANN001, ANN202
    fig.canvas.draw()
    return artist.get_window_extent(fig.canvas.get_renderer())


def test_a_short_legend_sits_inside_its_axes(tmp_path) -> None:
    a, b = make_run(tmp_path, "a", [0.5, 0.6], gamma=0.1), make_run(tmp_path, "b", [0.5, 0.7])
    with paper_style():
        fig = figure_of(a, b)
    ax_b = fig.axes[1]
    legend, box = _extent(fig, ax_b.get_legend()), _extent(fig, ax_b)
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and box.y0 <= legend.y0 and legend.y1 <= box.y1
    plt.close(fig)


def test_a_long_legend_goes_under_its_panel_and_leaves_no_empty_canvas(tmp_path) -> None:
    runs = [
        make_run(tmp_path, f"r{k}", [0.5, 0.6 + k / 100], lam=0.01 * (k + 1), gamma=0.1 * (k + 1))
        for k in range(7)
    ]
    with paper_style():
        fig = figure_of(*runs)
    ax_r, ax_b = fig.axes
    legend, box = _extent(fig, ax_b.get_legend()), _extent(fig, ax_b)
    assert legend.y1 < box.y0  # below the panel, not beside it
    assert box.x0 - 1 <= legend.x0 and legend.x1 <= box.x1 + 1  # as wide as the panel at most
    # the saved canvas (tight box) is as wide as the axes with their labels: no column of legend
    canvas = fig.get_tightbbox(fig.canvas.get_renderer())
    axes_right = max(ax.get_tightbbox(fig.canvas.get_renderer()).x1 for ax in (ax_r, ax_b))
    assert canvas.x1 * fig.dpi <= axes_right + 2
    plt.close(fig)


def test_colour_scale_of_a_constant_of_a_selection_and_of_many_values() -> None:
    constant = colour_scale(np.ma.masked_array(np.full((3, 3), 3.0), mask=np.eye(3, dtype=bool)))
    assert constant.constant == 3.0
    selection = colour_scale(np.array([[0.0, 1.0], [1.0, 1.0]]))
    assert selection.constant is None and isinstance(selection.norm, BoundaryNorm)
    assert list(selection.ticks) == [0.0, 1.0]
    zero, one = (selection.cmap(selection.norm(v)) for v in (0.0, 1.0))
    assert zero == plt.get_cmap("viridis")(0.0) and one == plt.get_cmap("viridis")(1.0)
    many = colour_scale(np.linspace(3.0, 3.5, 20))
    assert (many.norm.vmin, many.norm.vmax) == (3.0, 3.5)  # its own range, not from 0


def test_maps_all_of_one_norm_are_said_to_be_so_not_drawn_as_a_colour_bar() -> None:
    edges = np.array([[0, 1], [1, 2]])
    fig = map_norm_figure(np.full((3, 3), 2.0), edges, "proxies")
    assert len(fig.axes) == 1  # no colour bar
    texts = legend_texts(fig.axes[0])
    assert any("= 2 (all equal)" in t for t in texts), texts
    plt.close(fig)


def test_titles_name_the_setting_not_its_cell_folder(tmp_path, monkeypatch) -> None:
    from sheaf_fmtl.experiments.reproduce import draw_figures
    from sheaf_fmtl.plots import heatmap

    runs = []
    for gamma in (0.01, 0.1):
        run = make_run(tmp_path / f"sheaf-fmtl-g{gamma}", "seed0", [0.5, 0.6], gamma=gamma)
        torch.save(
            {"map_norms": torch.ones(3, 3), "edges": torch.tensor([[0, 1], [1, 2]])}, run / "checkpoint.pt"
        )
        summary = {"metric": "accuracy", "status": "ok", "checkpoint": file_digest(run / "checkpoint.pt")}
        (run / "summary.json").write_text(json.dumps(summary))
        runs.append(run)
    titles: list[str] = []
    drawn = heatmap.map_norm_figure
    monkeypatch.setattr(heatmap, "map_norm_figure", lambda *a: titles.append(a[-1]) or drawn(*a))
    draw_figures(runs, tmp_path / "figures", heatmaps=True)
    assert len(titles) == 2 and not any("sheaf-fmtl-g" in t for t in titles)
    assert titles[0].endswith("Sheaf-FMTL, gamma=0.01") and titles[1].endswith("Sheaf-FMTL, gamma=0.1")
    alone = {"algorithm": "sheaf-fmtl", "maps": "redrawn", "gamma": 0.1}
    assert setting_label(alone, [alone]) == "Sheaf-FMTL (gamma=0.1, maps redrawn each round, selection)"


def test_edge_weight_ticks_keep_apart_over_many_clients_and_rounds() -> None:
    n, rounds = 30, np.arange(0, 5000, 5)
    edges = np.array([(i, (i + k) % n) for i in range(n) for k in (1, 2)])
    final = np.zeros((n, n))
    final[edges[:, 0], edges[:, 1]] = final[edges[:, 1], edges[:, 0]] = 0.5
    weights = {
        "final": final,
        "edges": edges,
        "history": np.full((len(rounds), len(edges)), 0.5),
        "rounds": rounds,
    }
    with paper_style():
        fig = edge_weight_figure(weights, None, "long")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    heat, history = fig.axes[0], fig.axes[1]  # (the colour bar comes last)
    over_rounds = _shown_labels(history.xaxis, renderer)
    assert 2 <= len(over_rounds) <= 7 and _apart(over_rounds)
    for axis, along in ((heat.xaxis, "x"), (heat.yaxis, "y")):
        shown = _shown_labels(axis, renderer)
        assert 3 <= len(shown) <= 11 and _apart(shown, along)
    ticked = {round(v) for v in (*heat.xaxis.get_majorticklocs(), *heat.xaxis.get_minorticklocs())}
    assert ticked >= set(range(n))  # every client still ticked
    plt.close(fig)
