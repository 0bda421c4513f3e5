"""Figures of ``sheaf-fmtl plot``: legends, metric panels, seed bands, heatmap masking, outputs, and
the refusal to draw nothing. Run folders are written by hand in ``tmp_path``."""

from __future__ import annotations

import csv
import json
import math
import statistics

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import yaml

from sheaf_fmtl.cli import main
from sheaf_fmtl.metrics.final import file_digest
from sheaf_fmtl.metrics.groups import differing_keys, group_by_config
from sheaf_fmtl.plots import plot_demo, plot_runs
from sheaf_fmtl.plots.curves import metric_figure
from sheaf_fmtl.plots.heatmap import map_norm_figure
from sheaf_fmtl.plots.records import load_run
from sheaf_fmtl.plots.style import PALETTE, paper_style

BASE = {
    "algorithm": "sheaf-fmtl",
    "dataset": "vehicle",
    "model": "auto",
    "graph": "erdos-renyi",
    "lam": 0.01,
    "alpha": 0.05,
    "eta": 0.01,
    "gamma": 0.3,
    "seed": 0,
    "data_dir": "",
    "data": {},
}


def make_run(
    root, name, values, *, rounds=None, bits=None, metric="accuracy", column=None, summary=True, **config
):
    """A run folder: ``config.yaml`` (BASE updated by ``config``), ``metrics.csv``, ``summary.json``."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({**BASE, **config}, sort_keys=False))
    rounds = list(range(0, 10 * len(values), 10)) if rounds is None else rounds
    bits = [1000 * (k + 1) for k in range(len(values))] if bits is None else bits
    column = column or {"accuracy": "test_accuracy", "mse": "test_mse"}[metric]
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", column, "train_loss", "transmitted_bits"])
        w.writerows([k, v, 0.5, b] for k, v, b in zip(rounds, values, bits, strict=True))
    if summary:
        (run / "summary.json").write_text(json.dumps({"metric": metric, "final": values[-1]}))
    return run


def figure_of(*runs):
    return metric_figure([load_run(r) for r in runs])


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_legend_names_the_algorithm_and_only_the_keys_that_differ(tmp_path):
    a = make_run(tmp_path, "a", [0.5, 0.6], gamma=0.1)
    b = make_run(tmp_path, "b", [0.5, 0.7], gamma=0.3, data_dir="/elsewhere")  # bookkeeping only
    c = make_run(tmp_path, "c", [0.5, 0.55], algorithm="local", gamma=0.3, bits=[0, 0])
    fig = figure_of(a, b, c)
    ax_r, ax_b = fig.axes
    assert ax_r.get_legend() is None  # one legend per row, beside the bits panel
    assert legend_texts(ax_b) == [
        "Sheaf-FMTL, gamma=0.1",
        "Sheaf-FMTL, gamma=0.3",
        "local training (sends nothing)",  # gamma differs, but local training does not read it
    ]
    assert ax_r.get_ylabel() == ax_b.get_ylabel() == "test accuracy"
    assert "vehicle" in ax_r.get_title() and "vehicle" in ax_b.get_title()
    assert [line.get_color() for line in ax_r.get_lines()] == list(PALETTE[:3])  # colour-blind-safe
    plt.close(fig)


def test_legend_names_nested_data_options_and_models(tmp_path):
    a = make_run(tmp_path, "a", [0.5], model="logistic", data={"relatedness": 0.5})
    b = make_run(tmp_path, "b", [0.6], model="mlp", data={"relatedness": 1.0})
    fig = figure_of(a, b)
    assert legend_texts(fig.axes[1]) == [
        "Sheaf-FMTL, model=logistic, data.relatedness=0.5",
        "Sheaf-FMTL, model=mlp, data.relatedness=1",
    ]
    plt.close(fig)


def test_mse_and_accuracy_never_share_an_axis(tmp_path):
    acc = make_run(tmp_path, "acc", [0.5, 0.6], metric="accuracy")
    mse = make_run(tmp_path, "mse", [3.0, 2.0], metric="mse", dataset="school")
    fig = figure_of(acc, mse)
    (acc_r, acc_b), (mse_r, mse_b) = np.array(fig.axes).reshape(2, 2)
    assert acc_r.get_ylabel() == acc_b.get_ylabel() == "test accuracy"
    assert mse_r.get_ylabel() == mse_b.get_ylabel() == "test MSE"
    assert "vehicle" in acc_r.get_title() and "school" in mse_r.get_title()
    assert "school" not in acc_r.get_title()
    assert [list(line.get_ydata()) for line in acc_r.get_lines()] == [[0.5, 0.6]]
    assert [list(line.get_ydata()) for line in mse_r.get_lines()] == [[3.0, 2.0]]
    plt.close(fig)


def _band_half_widths(collection):
    """``{x: (top - bottom) / 2}`` of a fill_between polygon."""
    spans: dict[float, list[float]] = {}
    for x, y in collection.get_paths()[0].vertices:
        spans.setdefault(round(float(x), 9), []).append(float(y))
    return {x: (max(ys) - min(ys)) / 2 for x, ys in spans.items()}


def test_seeds_are_one_curve_with_a_standard_error_band(tmp_path):
    seeds = [[0.50, 0.60, 0.70], [0.55, 0.65, 0.80], [0.60, 0.62, 0.75]]
    runs = [make_run(tmp_path, f"s{i}", v, seed=i) for i, v in enumerate(seeds)]
    # one seed evaluated once more: only the rounds all seeds have are averaged
    extra = make_run(tmp_path, "s3", [0.4, 0.5, 0.6, 0.9], seed=3, rounds=[0, 10, 20, 30])
    other = make_run(tmp_path, "lam", [0.5, 0.5, 0.5], lam=0.1)
    fig = figure_of(*runs, extra, other)
    ax_r, ax_b = fig.axes
    all_seeds = [*seeds, [0.4, 0.5, 0.6]]
    assert legend_texts(ax_b) == [
        "Sheaf-FMTL, lam=0.01, mean ± s.e. of 4 seeds",
        "Sheaf-FMTL, lam=0.1, seed=0",
    ]
    mean_line = ax_r.get_lines()[0]
    assert list(mean_line.get_xdata()) == [0, 10, 20]
    per_round = list(zip(*all_seeds, strict=True))
    np.testing.assert_allclose(mean_line.get_ydata(), [statistics.mean(c) for c in per_round])
    stderr = [statistics.stdev(c) / math.sqrt(4) for c in per_round]
    assert len(ax_r.collections) == 1  # one band: the single run has none
    widths = _band_half_widths(ax_r.collections[0])
    np.testing.assert_allclose([widths[x] for x in (0, 10, 20)], stderr)
    bits_widths = _band_half_widths(ax_b.collections[0])
    np.testing.assert_allclose([bits_widths[x] for x in (1000, 2000, 3000)], stderr)
    plt.close(fig)


def test_group_by_config_separates_settings_and_keeps_seed_order(tmp_path):
    a0 = make_run(tmp_path, "a0", [0.5], seed=0)
    b0 = make_run(tmp_path, "b0", [0.5], seed=0, eta=0.0)
    a1 = make_run(tmp_path, "a1", [0.5], seed=1, data_dir="/moved", device="cuda", versions={"torch": "9"})
    groups = group_by_config([a0, b0, a1])
    assert [g.runs for g in groups] == [(a0, a1), (b0,)]
    assert groups[0].varied == {"seed": [0, 1]} and "seed" not in groups[0].config
    assert groups[1].config["eta"] == 0.0
    assert len(group_by_config([a0, a1], ignore=())) == 2
    assert differing_keys([{"a": 1, "data": {"x": [1, 2]}}, {"a": 1, "data": {"x": [1, 3]}, "b": 0}]) == [
        "data.x",
        "b",
    ]


def test_a_key_a_run_did_not_record_reads_as_its_default() -> None:
    """A run written before a config key existed ran as its default: no spurious legend entry
    (``metric_goal=None`` against ``metric_goal=auto``) and one group with today's runs."""
    old, new = {"algorithm": "local", "seed": 0}, {"algorithm": "local", "seed": 1, "metric_goal": "auto"}
    assert differing_keys([old, new]) == ["seed"]
    assert differing_keys([old, {**new, "metric_goal": "max"}]) == ["seed", "metric_goal"]
    assert len(group_by_config(["a", "b"], configs=[old, new])) == 1


def test_round_ticks_are_integers(tmp_path):
    run = make_run(tmp_path, "a", [0.1, 0.2, 0.3, 0.4], rounds=[0, 1, 2, 3])
    fig = figure_of(run)
    fig.canvas.draw()
    ticks = fig.axes[0].get_xticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def _pixel(fig, ax, x, y):
    """RGB at the data point ``(x, y)``."""
    fig.canvas.draw()
    image = np.asarray(fig.canvas.buffer_rgba())
    px, py = ax.transData.transform((x, y))
    return image[image.shape[0] - int(round(py)), int(round(px)), :3].astype(int)


def test_heatmap_masks_non_edges_apart_from_zero_norms():
    edges = np.array([[0, 1], [1, 2], [2, 3]])
    norms = np.zeros((4, 4))
    for i, j in edges:
        norms[i, j], norms[j, i] = 1.0 + i, 2.0 + j
    norms[2, 3] = 0.0  # a zero map on an edge: a value, not a hole
    fig = map_norm_figure(norms, edges, "title")
    ax = fig.axes[0]
    values = ax.collections[0].get_array()
    expected_edge = np.zeros((4, 4), dtype=bool)
    expected_edge[edges[:, 0], edges[:, 1]] = expected_edge[edges[:, 1], edges[:, 0]] = True
    assert np.array_equal(np.ma.getmaskarray(values).reshape(4, 4), ~expected_edge)
    assert list(ax.get_xticks()) == list(ax.get_yticks()) == [0, 1, 2, 3]
    zero, hole = _pixel(fig, ax, 3, 2), _pixel(fig, ax, 2, 0)  # (x=j, y=i)
    viridis_zero = np.array(plt.get_cmap("viridis")(0.0)[:3]) * 255
    assert np.abs(zero - viridis_zero).max() < 3
    assert np.abs(hole - viridis_zero).max() > 100
    plt.close(fig)


def test_plot_runs_writes_png_and_vector_pdf(tmp_path):
    a = make_run(tmp_path, "a", [0.5, 0.6])
    torch.save({"map_norms": torch.ones(3, 3), "edges": torch.tensor([[0, 1], [1, 2]])}, a / "checkpoint.pt")
    summary = json.loads((a / "summary.json").read_text())  # what the run records of its final state
    (a / "summary.json").write_text(json.dumps({**summary, "checkpoint": file_digest(a / "checkpoint.pt")}))
    b = make_run(tmp_path, "b", [0.5, 0.55], algorithm="local", bits=[0, 0])
    written = plot_runs([a, b], tmp_path / "out")
    stems = ("map_norms_a", "metric_vs_rounds_and_bits")
    assert sorted(p.name for p in written) == [f"{s}.{fmt}" for s in stems for fmt in ("pdf", "png")]
    for path in written:
        head = path.read_bytes()[:8]
        assert head.startswith(b"%PDF" if path.suffix == ".pdf" else b"\x89PNG")
    pdf = (tmp_path / "out" / "metric_vs_rounds_and_bits.pdf").read_bytes()
    assert b"/Subtype /Image" not in pdf  # curves are vector paths, not an embedded bitmap


EMPTY_METRICS = ["", "round,test_accuracy,transmitted_bits\n", "round,test_accuracy\n0,\n"]


@pytest.mark.parametrize("content", EMPTY_METRICS)
def test_nothing_to_plot_is_one_clear_error(tmp_path, capsys, content):
    run = make_run(tmp_path, "run", [0.5])
    (run / "metrics.csv").write_text(content)
    out = tmp_path / "plots"
    with pytest.raises(ValueError, match=r"^nothing to plot: .*run/metrics.csv has no evaluated rounds$"):
        plot_runs([run], out)
    assert main(["plot", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to plot: " in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_unknown_format_refused_before_anything_is_written(tmp_path):
    run = make_run(tmp_path, "a", [0.5])
    with pytest.raises(ValueError, match="png, pdf, svg"):
        plot_runs([run], tmp_path / "out", formats=("jpg",))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("column", "summary", "metric", "label"),
    [
        ("test_accuracy", True, "accuracy", "test accuracy"),
        ("test_mse", False, "mse", "test MSE"),
        ("test_metric", True, "mse", "test MSE"),  # a run folder from before the rename
        ("test_metric", False, "", "test metric"),
    ],
)
def test_metric_column_old_and_new_names(tmp_path, column, summary, metric, label):
    run = make_run(tmp_path, "r", [1.0, 2.0], column=column, metric=metric or "mse", summary=summary)
    record = load_run(run)
    assert record.metric == metric and list(record.values) == [1.0, 2.0]
    fig = metric_figure([record])
    assert fig.axes[0].get_ylabel() == label
    plt.close(fig)


def test_plot_demo_draws_its_rows(tmp_path):
    a = make_run(tmp_path, "a", [0.5, 0.6])
    b = make_run(tmp_path, "b", [0.5, 0.55], algorithm="local", bits=[0, 0])
    path = plot_demo([("first", [(a, "mine"), b])], tmp_path / "demo", title="t")
    assert path.name == "demo.png" and path.stat().st_size > 10_000


def test_labels_name_the_map_mode_and_keep_it_out_of_other_algorithms() -> None:
    from sheaf_fmtl.plots.labels import describe, legend_keys, long_label

    redrawn = {"algorithm": "sheaf-fmtl", "maps": "redrawn", "estimates": True, "gamma": 0.1}
    assert long_label(redrawn) == "Sheaf-FMTL (gamma=0.1, maps redrawn each round, selection, estimates)"
    assert long_label(
        {"algorithm": "sheaf-fmtl", "maps": "learned", "eta": 0.01, "lam": 0.1, "gamma": 0.3}
    ) == ("Sheaf-FMTL (gamma=0.3, the paper's learned maps)")
    assert long_label({"algorithm": "sheaf-fmtl", "maps": "features"}) == "Sheaf-FMTL (feature maps)"
    learned = {"algorithm": "sheaf-fmtl", "maps": "learned", "lam": 1.0, "gamma": 0.1}
    configs = [{**redrawn, "lam": 1.0}, learned, {**learned, "algorithm": "dfedu"}]
    keys = legend_keys(configs)
    assert keys == ["maps"]  # estimates differ too, but only maps=redrawn reads them
    assert describe(configs[2], keys) == "dFedU"
    assert legend_keys([configs[0], configs[2]]) == []  # the algorithm's name tells them apart


def _crowded(boxes: list) -> bool:  # noqa: ANN001
    """Two neighbouring labels closer than a label's height (about a character's width)."""
    boxes = sorted(boxes, key=lambda b: b.x0)
    return any(b.x0 - a.x1 < a.height for a, b in zip(boxes, boxes[1:], strict=False))


@pytest.mark.parametrize("bits", [[20_000, 200_000], [30_000, 60_000], [1_000, 10**9]])
def test_the_bits_axis_labels_never_overlap(tmp_path, bits):
    """Drawn as ``plot`` draws it, the bits axis's visible tick labels keep apart, and some are shown."""
    run = make_run(tmp_path, "a", [0.5, 0.6], bits=bits)
    with paper_style():
        fig = figure_of(run)
    fig.canvas.draw()
    ax_b = fig.axes[1]
    lo, hi = ax_b.get_xlim()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ticks = [*ax_b.xaxis.get_major_ticks(), *ax_b.xaxis.get_minor_ticks()]
    shown = [
        t.label1.get_window_extent(renderer)
        for t in ticks
        if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi
    ]
    assert len(shown) >= 2 and not _crowded(shown), [(b.x0, b.x1) for b in shown]
    plt.close(fig)


def test_separation_counts_within_and_between_group_edges_by_hand() -> None:
    from sheaf_fmtl.plots.edge_weights import edge_weight_figure, separation

    groups = np.array([0, 0, 1, 1])
    edges = np.array([[0, 1], [2, 3], [1, 2], [0, 3]])  # two within, two between
    final = np.zeros((4, 4))
    for (i, j), w in zip(edges, [0.9, 0.5, 0.5, 0.1], strict=True):
        final[i, j] = final[j, i] = w
    sep = separation(final, edges, groups)
    # within {0.9, 0.5}, between {0.5, 0.1}: pairs 0.9>0.5, 0.9>0.1, 0.5=0.5 (half), 0.5>0.1
    assert sep == pytest.approx({"within": 0.7, "between": 0.3, "auc": 3.5 / 4})
    one_kind = separation(final, edges[:2], groups)
    assert one_kind["within"] == pytest.approx(0.7) and np.isnan(one_kind["auc"])
    weights = {"final": final, "edges": edges, "history": np.zeros((0, 4)), "rounds": np.zeros(0, int)}
    fig = edge_weight_figure(weights, groups, "a graph saved once")
    assert len(fig.axes) == 2  # the heatmap and its colour bar; no rounds panel without a history
    assert "P(within > between) = 0.88" in fig.axes[0].get_title()


@pytest.mark.parametrize("groups", [True, False])
def test_the_edge_weight_history_covers_every_round_of_the_run(tmp_path, monkeypatch, groups):
    """Weights are exchanged every 5 rounds (rounds 0 and 5 of a 10-round run): the panel's lines
    hold the last exchange's weights to round 10, the run's last, as steps."""
    import sheaf_fmtl
    from sheaf_fmtl.plots import runs

    dataset = "synthetic-clusters" if groups else "synthetic"
    out = tmp_path / "run"
    sheaf_fmtl.run(dataset=dataset, clients=6, rounds=10, eval_every=5, edge_weights="relatedness", out=out)
    drawn = []

    def keep(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - edge_weight_figure's own
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    real = runs.edge_weight_figure
    monkeypatch.setattr(runs, "edge_weight_figure", keep)
    plot_runs([out], formats=("png",))
    (fig,) = drawn
    history = fig.axes[1]
    assert torch.load(out / "checkpoint.pt", weights_only=True)["edge_weight_rounds"].tolist() == [0, 5]
    lines = history.get_lines()
    assert lines and all(list(line.get_xdata()) == [0, 5, 10] for line in lines)
    assert all(line.get_drawstyle() == "steps-post" for line in lines)
    assert all(line.get_ydata()[-1] == line.get_ydata()[-2] for line in lines)  # (held, not a new value)
    assert history.get_xlim() == (0.0, 10.0)
    plt.close(fig)
