"""``sheaf-fmtl bench scale``: a point measured in its own process, failures recorded, the ratios
against the reference size, resuming, and the figure; and a round's Python calls that do not grow
with the number of clients; and the folders ``bench scale --out`` takes."""

from __future__ import annotations

import json
import sys

import pytest

from sheaf_fmtl.bench import scale
from sheaf_fmtl.bench.scale_worker import measure
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.runtime.run.folder.folderlock import is_marked
from sheaf_fmtl.runtime.run.folder.ledger import record_owned
from sheaf_fmtl.runtime.run.folder.rundir import mark, marker_kind


def _point(problem: str, n: int, startup: float, per_round: float, memory: float) -> dict:
    return scale.summarise(
        {
            "problem": problem,
            "clients": n,
            "rounds": 3,
            "degree": 8.0,
            "startup_seconds": startup,
            "round_seconds": [9.0, per_round, per_round],  # the first (warm-up) round is left out
            "peak_rss_bytes": memory + 100,
            "interpreter_rss_bytes": 100,
            "floor_bytes": {"data": memory / 4, "models": memory / 4},
        }
    )


def test_ratios_against_the_reference_size_by_hand():
    points = [
        _point("p", 1000, 2.0, 0.5, 1e8),
        _point("p", 10_000, 30.0, 4.0, 5e8),
        _point("q", 100, 1, 1, 1),
    ]
    assert points[1]["seconds_per_client_round"] == pytest.approx(4.0 / 10_000)
    assert points[1]["memory_over_floor"] == pytest.approx(2.0)
    r = scale.ratios(points)
    assert list(r) == ["p"]  # q has no reference point
    assert r["p"]["per_client_round"] == pytest.approx((4.0 / 10_000) / (0.5 / 1000))
    assert r["p"]["startup_over_linear"] == pytest.approx(30.0 / 2.0 / 10)
    assert r["p"]["memory_over_linear"] == pytest.approx(0.5)


@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_a_point_in_its_own_process_and_a_failing_one_recorded(tmp_path, monkeypatch):
    args = {"problem": "school-shaped", "clients": 30, "rounds": 2, "degree": 4.0}
    p = scale.summarise(scale.run_point(args, timeout=300))
    assert "failed" not in p, p
    assert p["clients"] == 30 and len(p["round_seconds"]) == 2 and p["memory_bytes"] > 0
    assert p["floor_bytes"]["data"] > 0 and p["floor_bytes"]["messages"] > 0 and p["startup_seconds"] > 0
    slow = scale.run_point({**args, "clients": 40}, timeout=0.01)
    assert slow["failed"].startswith("not finished")
    monkeypatch.setattr(sys, "executable", sys.executable + "-missing")
    with pytest.raises(OSError):
        scale.run_point(args, timeout=5)


def test_run_scale_keeps_finished_points_and_draws_the_figure(tmp_path, monkeypatch):
    calls = []

    def fake(args, timeout):
        calls.append(args["clients"])
        n = args["clients"]
        return {**args, **_point(args["problem"], n, n / 100, n / 1e4, n * 1e5)}

    monkeypatch.setattr(scale, "run_point", fake)
    result = scale.run_scale(tmp_path, ("synthetic",), (100, 1000, 2000), 3, 8.0, 60)
    assert calls == [100, 1000, 2000] and (tmp_path / "scale.png").stat().st_size > 0
    assert result["ratios"]["synthetic"]["clients"] == 2000
    again = scale.run_scale(tmp_path, ("synthetic",), (100, 1000, 2000, 4000), 3, 8.0, 60)
    assert calls == [100, 1000, 2000, 4000]  # only the new size ran
    assert [p["clients"] for p in json.loads((tmp_path / "scale.json").read_text())["points"]] == [
        100,
        1000,
        2000,
        4000,
    ]
    assert "4,000 against 1,000 clients" in scale.report(again)


def test_the_figure_draws_in_the_tables_units():
    """ms per client-round, start-up s and peak GB, as the report's table prints them."""
    import matplotlib.pyplot as plt

    from sheaf_fmtl.bench.scale_plot import scale_figure

    points = [_point("p", 1000, 2.0, 0.5, 1e8), _point("p", 10_000, 30.0, 4.0, 5e9)]
    fig = scale_figure(points)
    per_round, startup, memory = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "ms per client-round",
        "start-up s (to round 0)",
        "peak GB above the interpreter",
    ]
    table = scale.report({"points": points, "ratios": scale.ratios(points)})
    assert "ms/client-round" in table and "peak GB" in table and "start-up s" in table
    assert list(per_round.get_lines()[0].get_ydata()) == pytest.approx([0.5, 0.4])  # 1e3 * s / clients
    assert list(startup.get_lines()[0].get_ydata()) == pytest.approx([2.0, 30.0])
    assert list(memory.get_lines()[0].get_ydata()) == pytest.approx([0.1, 5.0])  # bytes / 1e9
    assert list(memory.get_lines()[2].get_ydata()) == pytest.approx([0.05, 2.5])  # the floor, in GB too
    plt.close(fig)


def test_measure_in_process_school_shaped():
    p = measure("school-shaped", 24, 2, 4.0)
    assert p["model_dims"] == [29] and p["edges"] >= 23 and p["metric"] > 0  # MSE


def _python_calls_in_a_round(clients: int) -> int:
    sim = build_simulation(RunConfig(dataset="synthetic", clients=clients, graph_degree=4, rounds=10))
    sim.step()  # start-up work done on the first round (draws' tables, caches)
    calls = 0

    def count(frame, event, arg):  # noqa: ANN001
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        sim.step()
    finally:
        sys.setprofile(None)
    return calls


def test_a_rounds_python_calls_do_not_grow_with_the_clients():
    """No Python loop over clients or edges in a round of the default Sheaf-FMTL: 40 and 320
    clients make the same Python calls (C calls are not counted: each client's mini-batch stream
    is one ``uniform_`` call, see the scaling page)."""
    small, large = _python_calls_in_a_round(40), _python_calls_in_a_round(320)
    assert large == small, (small, large)


@pytest.fixture
def no_points(monkeypatch):
    """``bench scale`` with its measurements replaced: the folders it ran into."""
    ran = []

    def fake(out, *args):  # noqa: ANN001, ANN002, ANN202
        ran.append(out)
        return {"points": [], "ratios": {}}

    monkeypatch.setattr(scale, "run_scale", fake)
    return ran


def _bench_scale(out) -> int:  # noqa: ANN001
    return main(["bench", "scale", "--out", str(out), "--sizes", "10"])


def test_bench_scale_refuses_a_finished_run_folder(tmp_path, no_points, capsys):
    run = tmp_path / "run"
    assert main(["run", "--set", "rounds=1", "eval_every=1", "clients=4", "--quiet", "--out", str(run)]) == 0
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir())
    capsys.readouterr()
    assert _bench_scale(run) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a sheaf-fmtl run folder, not a bench-scale one" in err, err
    assert no_points == [] and sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir()) == before


def test_bench_scale_refuses_another_kind_and_a_folder_of_yours(tmp_path, no_points, capsys):
    sweep = mark(tmp_path / "sweep", "sweep")
    (sweep / "sweep.csv").write_text("mine\n")
    assert _bench_scale(sweep) == 2
    assert "holds a sheaf-fmtl sweep folder" in capsys.readouterr().err
    yours = tmp_path / "yours"
    yours.mkdir()
    (yours / "scale.json").write_text("{}")
    assert _bench_scale(yours) == 2
    assert "not written by sheaf-fmtl" in capsys.readouterr().err
    assert no_points == [] and (yours / "scale.json").read_text() == "{}" and not is_marked(yours)


def test_bench_scale_takes_a_new_empty_or_earlier_bench_scale_folder(tmp_path, no_points, capsys):
    new, empty = tmp_path / "new", tmp_path / "empty"
    empty.mkdir()
    assert _bench_scale(new) == 0 and _bench_scale(new) == 0 and _bench_scale(empty) == 0
    assert no_points == [new, new, empty] and marker_kind(new) == "bench-scale"
    older = tmp_path / "older"  # written before bench scale marked its folder: its ledger names its files
    older.mkdir()
    (older / "scale.json").write_text('{"points": []}')
    record_owned(older, scale.OUTPUTS)
    assert _bench_scale(older) == 0 and marker_kind(older) == "bench-scale"
    capsys.readouterr()
    assert main(["reproduce", "curves", "--quick", "--quiet", "--out", str(new)]) == 2  # and its own kind
    assert "holds a sheaf-fmtl bench-scale folder" in capsys.readouterr().err
