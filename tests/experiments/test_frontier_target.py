"""The frontier's bits to target: a curve read from a hand-written ``metrics.csv``, the arithmetic
against a hand computation (never reached, reached at the first evaluation, the MSE direction,
dFedU's own ratio), the report's columns and the figure's bits axis."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.experiments.frontier_points import Method, Point
from sheaf_fmtl.experiments.frontier_report import add_bits_to_target, bit_axis, markdown, row
from sheaf_fmtl.experiments.frontier_target import (
    ToTarget,
    bits_to_target,
    fewer_bits,
    read_curve,
    target,
    to_target,
)

HEADER = "round,test_mse,train_loss,objective,sheaf_energy,transmitted_bits,rejected_messages,"
HEADER += "dropped_messages,wall_seconds\n"


def _curve(bits: list[float], values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(bits, dtype=float), np.array(values, dtype=float)


def test_read_curve_from_a_hand_written_metrics_file(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text(
        HEADER + "0,150.5,1,1,0,0,0,0,0.1\n10,,1,1,0,4000,0,0,0.2\n20,120.25,1,1,0,8000,0,0,0.3\n"
    )
    curve = read_curve(tmp_path)
    assert curve is not None
    bits, values = curve
    assert bits.tolist() == [0.0, 4000.0, 8000.0]
    assert values[0] == 150.5 and math.isnan(values[1]) and values[2] == 120.25
    assert read_curve(tmp_path / "absent") is None
    (tmp_path / "metrics.csv").write_text("round,test_mse\n0,1.0\n")  # no bits column
    assert read_curve(tmp_path) is None


def test_read_curve_and_the_other_readers_take_the_clients_present_column(tmp_path: Path) -> None:
    """metrics.csv's last column, ``clients_present``, leaves every reader's numbers as they were."""
    from sheaf_fmtl.metrics.aggregate import final_metric
    from sheaf_fmtl.metrics.results import METRIC_COLUMNS, read_metrics
    from sheaf_fmtl.plots.records import load_run

    assert METRIC_COLUMNS[-1] == "clients_present" and METRIC_COLUMNS.index("wall_seconds") == 8
    (tmp_path / "config.yaml").write_text("dataset: school\n")
    (tmp_path / "metrics.csv").write_text(
        HEADER.rstrip("\n") + ",clients_present\n0,150.5,1,1,0,0,0,0,0.1,2\n10,120.25,1,1,0,4000,0,0,0.2,4\n"
    )
    curve = read_curve(tmp_path)
    assert curve is not None
    assert curve[0].tolist() == [0.0, 4000.0] and curve[1].tolist() == [150.5, 120.25]
    assert read_metrics(tmp_path)["clients_present"] == [2.0, 4.0]
    assert load_run(tmp_path).values.tolist() == [150.5, 120.25]
    assert final_metric(tmp_path, {}) == 120.25


def test_bits_to_target_by_hand() -> None:
    # dFedU's finals 0.80, 0.70, 0.75: mean 0.75, target 0.745 (half an accuracy point below)
    dfedu = [
        _curve([0, 10, 20, 30], [0.1, 0.5, 0.79, 0.80]),  # first at or above 0.745: 20 bits
        _curve([0, 10, 20, 30], [0.1, 0.6, 0.7, 0.70]),  # never
        _curve([0, 10, 20, 30], [0.1, 0.78, 0.74, 0.75]),  # 10 bits (the first, not the last)
    ]
    goal = target(0.75, higher=True)
    assert goal == pytest.approx(0.745)
    ref = to_target(dfedu, goal, higher=True)
    assert (ref.bits, ref.reached, ref.seeds, ref.shown) == (15.0, 2, 3, "2/3")
    assert fewer_bits(ref, ref) == 1.0  # dFedU against itself, computed as every other point
    other = to_target([_curve([0, 2, 4], [0.1, 0.75, 0.8]), _curve([0, 2, 4], [0.1, 0.5, 0.746])], goal, True)
    assert (other.bits, other.shown) == (3.0, "2/2")
    assert fewer_bits(ref, other) == pytest.approx(5.0)  # 15 / 3


def test_never_reached_and_reached_at_the_first_evaluation() -> None:
    never = to_target([_curve([0, 5], [0.1, 0.2])], 0.5, True)
    assert math.isnan(never.bits) and never.shown == "0/1"
    assert math.isnan(fewer_bits(ToTarget(10.0, 1, 1), never))
    assert bits_to_target(_curve([7, 14], [0.8, 0.9]), 0.5, True) == 7.0
    first = to_target([_curve([0, 5], [0.9, 0.9])], 0.5, True)  # at round 0, before any bits
    assert (first.bits, first.shown) == (0.0, "1/1")
    assert fewer_bits(ToTarget(10.0, 1, 1), first) == math.inf
    assert bits_to_target(_curve([0, 3], [math.nan, 0.8]), 0.7, True) == 3.0  # NaN never reaches
    assert math.isnan(bits_to_target(_curve([0, 3], [0.9, 0.9]), math.nan, True))  # no target


def test_mse_target_is_above_the_final_and_reached_from_above() -> None:
    goal = target(105.0, higher=False)  # dFedU's finals 100 and 110
    assert goal == pytest.approx(105.525)
    curve = _curve([0, 1, 2, 3], [200.0, 106.0, 105.5, 100.0])
    assert bits_to_target(curve, goal, higher=False) == 2.0
    assert bits_to_target(curve, goal, higher=True) == 0.0  # the other direction: 200 is "at least"


def _point(tmp_path: Path, method: Method, curves: list[tuple[list[float], list[float]]]) -> Point:
    folder = tmp_path / method.slug
    summaries = []
    for seed, (bits, values) in enumerate(curves):
        run = folder / f"seed{seed}"
        run.mkdir(parents=True)
        evaluations = enumerate(zip(bits, values, strict=True))
        rows = "".join(f"{10 * k},{v},1,1,0,{b},0,0,0.1\n" for k, (b, v) in evaluations)
        (run / "metrics.csv").write_text(HEADER + rows)
        summaries.append(
            {
                "seed": seed,
                "final": values[-1],
                "metric": "mse",
                "higher_is_better": False,
                "transmitted_bits": bits[-1],
                "wall_seconds": 1.0,
                "rounds": 20,
            }
        )
    return Point("school", method, None, RunConfig(dataset="synthetic"), {}, summaries, folder)


def test_report_rows_and_table_carry_bits_to_target(tmp_path: Path) -> None:
    dfedu = Method("dFedU (whole models)", "dfedu", {"algorithm": "dfedu"})
    sheaf = Method("Sheaf-FMTL, redrawn maps", "redrawn", {"algorithm": "sheaf-fmtl"})
    points = [  # dFedU's finals 100 and 110: target 105.525
        _point(tmp_path, dfedu, [([0, 400, 800], [150, 104, 100]), ([0, 400, 800], [150, 120, 110])]),
        _point(tmp_path, sheaf, [([0, 40, 80], [150, 105, 101]), ([0, 40, 80], [150, 130, 106])]),
    ]
    rows = [row(p) for p in points]
    for r in rows:
        r["pareto"] = False
    add_bits_to_target(points, rows)
    assert rows[0]["target"] == pytest.approx(105.525)
    assert (rows[0]["bits_to_target"], rows[0]["reached"]) == (400, "1/2")
    assert rows[0]["fewer_bits_than_dfedu"] == 1.0  # dFedU's own row, computed as the others'
    assert (rows[1]["bits_to_target"], rows[1]["reached"]) == (40, "1/2")
    assert rows[1]["fewer_bits_than_dfedu"] == pytest.approx(10.0)
    text = markdown(rows, {})
    assert "test mse (lower is better)" in text and "bits to target | x fewer bits than dFedU |" in text
    assert "| 400 (1/2) | 1x |" in text and "| 40 (1/2) | 10x |" in text
    assert "at or below 105.5" in text


def test_bit_axis_labels_powers_of_ten_without_overlap() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cases = (([5e3, 7e11], None), ([3e7, 6e7], ["7", "8"]), ([1e6, 2e8], ["5", "6", "7", "8", "9"]))
    for bits, decades in cases:
        fig = Figure(figsize=(4.6, 3.8))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.plot(bits, [1.0] * len(bits))
        bit_axis(ax, bits)
        fig.canvas.draw()
        lo, hi = ax.get_xlim()
        labels = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
        texts = [t.get_text() for t in labels]
        assert all("10^{" in t for t in texts) and 2 <= len(texts) <= 7, texts
        if decades is not None:
            assert [t.split("10^{")[1].split("}")[0] for t in texts] == decades
        boxes = [t.get_window_extent() for t in labels]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), texts
