"""The demo problem (``synthetic-clusters``) and ``sheaf-fmtl demo`` end to end on tiny settings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from sheaf_fmtl.algorithms.maps.edge_weights import EVERY
from sheaf_fmtl.cli import main
from sheaf_fmtl.data.base import DatasetError
from sheaf_fmtl.data.registry import DataRequest, load, load_raw
from sheaf_fmtl.data.synthetic import clusters_feature_sets, clusters_groups

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"


def _arrays(raw):
    return [a for c in raw.clients for a in (c.x, c.y, c.x_test, c.y_test)]


def test_generator_is_deterministic_under_its_seed():
    a = load_raw("synthetic-clusters", DataRequest(seed=3))
    b = load_raw("synthetic-clusters", DataRequest(seed=3))
    c = load_raw("synthetic-clusters", DataRequest(seed=4))
    assert all(np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(b), strict=True))
    assert not all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(_arrays(a), _arrays(c), strict=True)
    )


def test_heterogeneous_problem_has_scarce_unequal_data_and_differing_model_sizes():
    fed = load("synthetic-clusters", DataRequest(seed=0))
    assert fed.num_clients == 30 and fed.task == "classification"
    widths = {fed.feature_shape(i)[0] for i in range(fed.num_clients)}
    assert widths == {12, 18, 24}
    n_train = [len(c.y_train) for c in fed.clients]
    assert max(n_train) <= 60 and min(n_train) < 10 < max(n_train)
    assert all(len(c.y_test) == 200 for c in fed.clients)
    seen = clusters_feature_sets({}, 0)
    assert [len(s) for s in seen] == [fed.feature_shape(i)[0] for i in range(fed.num_clients)]
    assert len({tuple(s) for s in seen if len(s) == 12}) > 1  # random subsets, not one prefix
    assert clusters_groups() == sorted(clusters_groups()) and set(clusters_groups()) == {0, 1, 2}


def test_homogeneous_variant_keeps_clients_samples_and_labels():
    het = load("synthetic-clusters", DataRequest(seed=1))
    hom = load("synthetic-clusters", DataRequest(seed=1, options={"homogeneous": True}))
    assert het.num_clients == hom.num_clients and het.num_classes == hom.num_classes
    for i, (a, b) in enumerate(zip(het.clients, hom.clients, strict=True)):
        assert np.array_equal(a.y_train, b.y_train) and np.array_equal(a.y_test, b.y_test)
        assert hom.feature_shape(i) == (24,)
    # the columns a heterogeneous client sees are among the homogeneous client's raw features
    raw_het = load_raw("synthetic-clusters", DataRequest(seed=1))
    raw_hom = load_raw("synthetic-clusters", DataRequest(seed=1, options={"homogeneous": True}))
    for k, cols in enumerate(clusters_feature_sets({}, 1)):
        assert np.array_equal(raw_het.clients[k].x, raw_hom.clients[k].x[:, cols])


def test_generator_rejects_bad_options():
    with pytest.raises(DatasetError, match="unknown dataset option data.colour"):
        load_raw("synthetic-clusters", DataRequest(options={"colour": 1}))
    with pytest.raises(DatasetError, match="feature_counts"):
        load_raw("synthetic-clusters", DataRequest(options={"feature_counts": [30]}))


def test_demo_runs_end_to_end_and_writes_its_plot(tmp_path, capsys):
    out = tmp_path / "demo"
    tiny = ["--set", "rounds=2", "--set", "eval_every=1", "--set", "clients=9"]
    unread = ["--set", "graph_m=3"]  # read by no run of the demo (its graph is watts-strogatz)
    assert main(["demo", str(DEMO_CONFIG), "--out", str(out), "--quiet", *tiny, *unread]) == 0
    runs = (
        ("heterogeneous", "sheaf-fmtl-features", "sheaf-fmtl", "features"),
        ("heterogeneous", "sheaf-fmtl-learned", "sheaf-fmtl", "learned"),
        ("heterogeneous", "local", "local", "auto"),
        ("homogeneous", "sheaf-fmtl-redrawn", "sheaf-fmtl", "redrawn"),
        ("homogeneous", "sheaf-fmtl-learned", "sheaf-fmtl", "learned"),
        ("homogeneous", "dfedu", "dfedu", "auto"),  # maps is not read by the baselines
        ("homogeneous", "local", "local", "auto"),
    )
    for problem, key, algorithm, maps in runs:
        run_dir = out / problem / key
        assert (run_dir / "metrics.csv").is_file()
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert cfg["algorithm"] == algorithm and cfg["dataset"] == "synthetic-clusters"
        assert cfg["maps"] == maps and not cfg["estimates"]
        assert cfg["data"].get("homogeneous", False) == (problem == "homogeneous")
    assert (out / "demo.png").stat().st_size > 10_000
    summary = json.loads((out / "demo.json").read_text())
    het, hom = summary["runs"]["heterogeneous"], summary["runs"]["homogeneous"]
    assert het["local"]["transmitted_bits"] == 0 and het["sheaf-fmtl-features"]["transmitted_bits"] > 0
    assert len(het["sheaf-fmtl-learned"]["model_dims"]) > 1
    assert hom["dfedu"]["model_dims"] == [50]
    versus = summary["comparisons"]["homogeneous/sheaf-fmtl-redrawn-vs-dfedu"]
    ratio = hom["dfedu"]["transmitted_bits"] / hom["sheaf-fmtl-redrawn"]["transmitted_bits"]
    # d_e = 4 of 50 coordinates a round, and the edge weights' two numbers every EVERY rounds
    rounds = hom["dfedu"]["rounds"]
    sent = rounds * 4 + 2 * math.ceil(rounds / EVERY)
    assert versus["bits_ratio"] == pytest.approx(ratio) == pytest.approx(rounds * 50 / sent)
    feature = summary["comparisons"]["heterogeneous/sheaf-fmtl-features-vs-local"]
    diff = 100 * (het["sheaf-fmtl-features"]["final"] - het["local"]["final"])
    assert feature["difference"] == pytest.approx(diff) and feature["bits_ratio"] is None
    printed, err = capsys.readouterr()
    # the demo's own keys that some of its runs read (eta, gamma, lam) are not warned about; each run
    # lists what it did not read; the key none reads is named once
    assert [line for line in err.splitlines() if "warning" in line] == [
        "sheaf-fmtl: warning: config key graph_m: read by no run of the demo"
    ]
    local = yaml.safe_load((out / "heterogeneous" / "local" / "config.yaml").read_text())
    assert sorted(local["unused"]) == ["eta", "gamma", "graph_m", "lam"]
    assert "demo.png" in printed and "the paper's learned maps" in printed
    assert "default maps (auto: features)" in printed and "default maps (auto: redrawn)" in printed
    assert "target" not in printed and "issue" not in printed


def test_demo_comparisons_give_differences_and_bits_ratios():
    from sheaf_fmtl.demo import _demo_comparisons

    def run(final, bits, label):  # noqa: ANN001, ANN202
        return {"final": final, "metric": "accuracy", "transmitted_bits": bits, "label": label}

    finals = {
        "heterogeneous": {"sheaf-fmtl-features": run(0.64, 80, "B"), "local": run(0.605, 0, "L")},
        "homogeneous": {"sheaf-fmtl-redrawn": run(0.735, 10, "S"), "dfedu": run(0.744, 95, "D")},
    }
    out = _demo_comparisons(finals)
    assert set(out) == {
        "heterogeneous/sheaf-fmtl-features-vs-local",
        "homogeneous/sheaf-fmtl-redrawn-vs-dfedu",
    }
    assert out["heterogeneous/sheaf-fmtl-features-vs-local"]["difference"] == pytest.approx(3.5)
    hom = out["homogeneous/sheaf-fmtl-redrawn-vs-dfedu"]
    assert hom["difference"] == pytest.approx(-0.9) and hom["bits_ratio"] == pytest.approx(9.5)
    assert hom["text"].endswith("D sent 9.5x the bits") and "target" not in hom
