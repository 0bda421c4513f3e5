"""``sheaf-fmtl sweep``: grid parsing, the validation split (disjoint from the training data it is
held out of, never the test split), ranking, the best config written, cells reused."""

from __future__ import annotations

import argparse
import csv
import json

import numpy as np
import pytest
import yaml

from sheaf_fmtl.config import ConfigError, RunConfig, load_config
from sheaf_fmtl.data.base import RawClient, RawFederated
from sheaf_fmtl.data.protocol import ProtocolOptions, apply_protocol
from sheaf_fmtl.experiments import grid as gr
from sheaf_fmtl.experiments import sweep as sw
from sheaf_fmtl.experiments import sweep_cli

TINY = ["rounds=4", "eval_every=2", "graph=complete", "batch_size=8", "stability_check=true"]


def test_grid_values_log_lin_and_lists():
    assert gr.parse_values("1e-5:10:log7") == [1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0]
    assert gr.parse_values("0:1:lin3") == [0.0, 0.5, 1.0]
    assert gr.parse_values("0.01,0.05") == [0.01, 0.05]
    assert gr.parse_values("1e-3") == [0.001]
    assert gr.parse_values("gaussian, orthogonal") == ["gaussian", "orthogonal"]
    assert gr.parse_values("2:8:log3") == [2.0, 4.0, 8.0]


@pytest.mark.parametrize(
    "items, fragment",
    [
        (["lam"], "KEY=VALUES"),
        (["bogus=1,2"], "unknown config key 'bogus'"),
        (["lam.x=1"], "unknown config key 'lam.x'"),
        (["lam=0:1:log3"], "log spacing needs a > 0"),
        (["lam=a:1:lin3"], "not a number"),
        (["lam=0.1,,0.2"], "empty value"),
        (["validation=0.1,0.2"], "--validation"),
        (["lam=1,2", "lam=3"], "given twice"),
        ([], "at least one --grid"),
    ],
)
def test_bad_grids_are_refused_with_one_line(items, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        gr.parse_grid(items)


def test_grid_points_and_integer_keys():
    grid = gr.parse_grid(["local_epochs=1:3:lin3", "alpha=0.01,0.05", "data.relatedness=0.5"])
    points = gr.grid_points(grid)
    assert len(points) == 6 and points[1] == {"local_epochs": 1.0, "alpha": 0.05, "data.relatedness": 0.5}
    cfg = gr.apply_point(RunConfig(), points[-1], validation=0.2)
    assert cfg.local_epochs == 3 and isinstance(cfg.local_epochs, int)
    assert cfg.data == {"relatedness": 0.5} and cfg.validation == 0.2
    with pytest.raises(ConfigError, match="validation"):
        gr.apply_point(RunConfig(), {}, validation=1.0)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_validation_split_is_disjoint_and_taken_from_training_data(task):
    rng = np.random.default_rng(0)
    clients = []
    for i in range(6):
        n = 40 + 7 * i
        x = (1000 * i + np.arange(n, dtype=np.float32))[:, None]  # each row names its sample
        y = rng.integers(0, 3, n) if task == "classification" else rng.normal(size=n)
        clients.append(RawClient(x, y))
    raw = RawFederated("ids", task, 3 if task == "classification" else 0, tuple(clients))
    plain = apply_protocol(raw, seed=4, options=ProtocolOptions(standardize=False))
    held = apply_protocol(raw, seed=4, options=ProtocolOptions(standardize=False, validation=0.25))
    for p, h in zip(plain.clients, held.clients, strict=True):
        train, val, test = (set(a[:, 0].tolist()) for a in (h.x_train, h.x_test, p.x_test))
        assert val and train and not (train & val)
        assert train | val == set(p.x_train[:, 0].tolist())  # held out of the training data
        assert not (val & test) and not (train & test)  # the test split is never touched
        assert abs(len(val) - 0.25 * (len(train) + len(val))) <= 3
        if task == "classification":  # stratified: every class with >= 2 training samples appears
            labels, counts = np.unique(p.y_train, return_counts=True)
            assert set(labels[counts >= 2].tolist()) <= set(h.y_test.tolist())


def _file_dataset(path, corrupt: bool) -> str:
    """Binary problem with a fixed test split; ``corrupt``: other test features and flipped labels."""
    rng = np.random.default_rng(1)
    arrays: dict[str, np.ndarray] = {"num_clients": np.array(5)}
    w = rng.normal(size=6)
    for i in range(5):
        x = rng.normal(size=(40, 6)).astype(np.float32)
        xt = rng.normal(size=(30, 6)).astype(np.float32)
        arrays[f"x_{i}"], arrays[f"y_{i}"] = x, (x @ w > 0).astype(np.int64)
        yt = (xt @ w > 0).astype(np.int64)
        if corrupt:
            xt = np.random.default_rng(9).normal(size=xt.shape).astype(np.float32)
            yt = 1 - yt
        arrays[f"x_test_{i}"], arrays[f"y_test_{i}"] = xt, yt
    np.savez(path, **arrays)
    return f"file:{path}"


def test_sweep_never_reads_the_test_split(tmp_path):
    grid = gr.parse_grid(["lam=0.001,0.1", "alpha=0.05,0.2"])
    results = []
    for corrupt in (False, True):
        base = load_config(None, [f"dataset={_file_dataset(tmp_path / f'd{corrupt}.npz', corrupt)}", *TINY])
        res = sw.sweep(base, grid, tmp_path / f"sweep{corrupt}", validation=0.25, log=lambda _: None)
        results.append([(c.point, c.value) for c in res.ranked])
        for c in res.ranked:
            assert json.loads((c.folder / "summary.json").read_text())["evaluated_on"] == "validation"
        # the same configs on the test split do see the corruption (so the comparison can fail)
        results.append(sw.run_cell(base, tmp_path / f"test{corrupt}")["final"])
    assert results[0] == results[2]
    assert results[1] != results[3]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sweep_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_sweep_command_ranks_writes_best_yaml_and_reuses_cells(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = [
        "sweep",
        "--grid",
        "lam=0.001,0.05",
        "--grid",
        "alpha=0.02,1e6",
        "--validation",
        "0.3",
        "--out",
        str(out),
        *(a for s in ["clients=6", *TINY] for a in ("--set", s)),
    ]
    assert _cli(argv) == 0
    text = capsys.readouterr().out
    assert "4 cells" in text and "best: lam=" in text and "refused" in text  # alpha=1e6: unstable
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4"]
    values = [float(r["validation_accuracy"]) for r in rows if r["validation_accuracy"]]
    assert values == sorted(values, reverse=True) and len(values) == 2
    assert {r["status"] for r in rows[2:]} == {"refused"}
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert "validation" not in best and "save_maps" not in best and "gamma" not in best  # defaults left out
    assert best["dataset"] == "synthetic-clusters" and best["rounds"] == 4
    assert best["lam"] == float(rows[0]["lam"]) and best["alpha"] == float(rows[0]["alpha"])
    cfg = load_config(out / "best.yaml")  # usable by run
    assert cfg.rounds == 4 and cfg.validation == 0.0
    stamp = (out / "cells" / rows[0]["folder"] / "summary.json").stat().st_mtime_ns
    assert _cli(argv) == 0
    assert capsys.readouterr().out.count("(reused)") == 4
    assert (out / "cells" / rows[0]["folder"] / "summary.json").stat().st_mtime_ns == stamp


def test_sweep_refuses_a_zero_validation(tmp_path):
    with pytest.raises(ConfigError, match="0 < validation < 1"):
        sw.sweep(RunConfig(), {"lam": [0.1]}, tmp_path, validation=0.0)
