"""``maps = auto``: the mode chosen for each kind of federation, what the run records, and ``lam``
left open resolved to the mode's default."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sheaf_fmtl
from sheaf_fmtl.algorithms.maps.auto import choose_maps
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.config.defaults import default_lam
from sheaf_fmtl.config.registry import edge_weights_of, map_mode_spec
from sheaf_fmtl.config.usage import UnusedKeysWarning
from sheaf_fmtl.data.base import ClientSplit, DatasetError, FederatedDataset
from sheaf_fmtl.data.user import from_objects as load_user_objects
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.runtime.run.loop import execute
from tests.algorithms.maps.test_coordinate_maps import image_dataset

SMALL = {"clients": 6, "rounds": 2, "eval_every": 1}


def _tabular_without_feature_ids() -> FederatedDataset:
    rng = np.random.default_rng(0)
    splits = []
    for k in range(4):
        width = 3 + k % 2  # two model sizes, and no feature ids to relate them
        x, xt = rng.normal(size=(10, width)), rng.normal(size=(4, width))
        splits.append(ClientSplit(x, rng.integers(0, 2, 10), xt, rng.integers(0, 2, 4)))
    return FederatedDataset("tabular", "classification", 2, tuple(splits))


@pytest.mark.parametrize(
    ("changes", "mode"),
    [
        ({"dataset": "synthetic"}, "redrawn"),
        ({"dataset": "synthetic-clusters", "data": {"homogeneous": True}}, "redrawn"),
        ({"dataset": "synthetic-hetero"}, "features"),
        ({"dataset": "synthetic-clusters"}, "features"),
    ],
)
def test_auto_picks_the_mode_for_the_built_in_problems_and_the_run_records_it(tmp_path, changes, mode):
    config = RunConfig(**{**SMALL, **changes})
    assert config.maps == "auto" and config.lam is None
    out = execute(config, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["maps"] == mode and summary["lam"] == pytest.approx(_lam_by_hand(config, mode), rel=1e-3)
    assert summary["maps_auto"] and summary["lam_rule"].startswith("lam = min(pull/q")  # why, and how
    assert out.config.maps == mode and out.config.lam == summary["lam"]  # config.yaml: what ran
    named = execute(config.replace(maps=mode), None).summary
    assert named["maps_auto"] is None and named["final"] == summary["final"]  # the same run


def _lam_by_hand(config: RunConfig, mode: str) -> float:
    """``min(pull / q, 1 / (alpha lambda_S))`` from a dense Laplacian and the model's size."""
    sim = build_simulation(config.replace(maps=mode, lam=0.0))
    graph, d = sim.ctx.graph, int(sim.ctx.fed.node_dims()[0])
    lap = np.diag(graph.degrees().astype(float))
    lap[graph.edges[:, 0], graph.edges[:, 1]] = lap[graph.edges[:, 1], graph.edges[:, 0]] = -1.0
    lmax = float(np.linalg.eigvalsh(lap).max())
    q = max(1, int(np.floor(config.gamma * d))) / d if mode == "redrawn" else 1.0
    pull = {"redrawn": 0.1, "features": 0.1}[mode]
    return min(pull / q, 1.0 / (config.alpha * (2 * (1 - q) + q * lmax)))


def test_the_default_lam_keeps_the_pull_at_every_compression_and_stops_at_averaging() -> None:
    """``lam q`` stays 0.1 from ``gamma`` 0.3 down to where exact averaging caps it."""
    base = RunConfig(dataset="synthetic", clients=12, graph="erdos-renyi", graph_p=0.4, rounds=1)
    pulls = []
    for gamma in (0.3, 0.1, 0.03, 0.005):
        sim = build_simulation(base.replace(gamma=gamma))
        d = int(sim.ctx.fed.node_dims()[0])
        q = max(1, int(gamma * d)) / d
        assert sim.config.lam == pytest.approx(_lam_by_hand(base.replace(gamma=gamma), "redrawn"), rel=1e-3)
        pulls.append(sim.config.lam * q)
    assert pulls[:2] == pytest.approx([0.1, 0.1], rel=1e-3)
    assert pulls[-1] < 0.1  # capped: alpha lam lambda_S = 1 at gamma 0.005
    assert "exact averaging" not in sim.lam_rule and "lambda_S" in sim.lam_rule


@pytest.mark.parametrize("alpha", [0.05, 2.0])
def test_dfedu_left_open_takes_the_same_rule_at_q_one_like_for_like(alpha: float) -> None:
    """dFedU's default ``lam = min(0.1, 1/(alpha lambda_max(L)))`` (the features maps' pull at q = 1),
    against a dense eigendecomposition; at ``alpha = 2`` the stability cap binds."""
    config = RunConfig(
        dataset="synthetic-clusters", data={"homogeneous": True}, clients=12, graph="erdos-renyi", graph_p=0.4
    )
    sim = build_simulation(config.replace(algorithm="dfedu", alpha=alpha))
    graph = sim.ctx.graph
    lap = np.zeros((12, 12))
    np.add.at(lap, (graph.edges[:, 0], graph.edges[:, 0]), 1.0)
    np.add.at(lap, (graph.edges[:, 1], graph.edges[:, 1]), 1.0)
    lap[graph.edges[:, 0], graph.edges[:, 1]] = lap[graph.edges[:, 1], graph.edges[:, 0]] = -1.0
    by_hand = min(0.1, 1.0 / (alpha * float(np.linalg.eigvalsh(lap).max())))
    assert sim.config.lam == pytest.approx(by_hand, rel=1e-3)
    assert (by_hand < 0.1) == (alpha == 2.0) and "q = 1" in (sim.lam_rule or "")
    sheaf = build_simulation(config.replace(maps="features", alpha=alpha))
    assert sheaf.config.lam == pytest.approx(sim.config.lam, rel=1e-3)  # the same pull as dFedU's
    given = build_simulation(config.replace(algorithm="dfedu", lam=0.02))
    assert given.config.lam == 0.02 and given.lam_rule is None


def test_summary_records_a_baselines_lam_only_where_it_reads_one(tmp_path) -> None:  # noqa: ANN001
    keys = {"dataset": "synthetic", "clients": 4, "rounds": 1}
    dfedu = execute(RunConfig(algorithm="dfedu", **keys), tmp_path / "dfedu").summary
    assert dfedu["lam"] == 0.1 and "q = 1" in dfedu["lam_rule"]
    with pytest.warns(UnusedKeysWarning, match="'lam'"):  # said to the user, and not recorded as run
        fedavg = execute(RunConfig(algorithm="fedavg", lam=0.5, **keys), tmp_path / "fedavg").summary
    assert "lam" not in fedavg and "lam_rule" not in fedavg  # (FedAvg reads no lam: nothing recorded)


def test_auto_picks_proxies_for_networks_and_learned_without_anything_to_relate() -> None:
    cnns = build_simulation(RunConfig(model="cnn-small,cnn-medium", clients=4), dataset=image_dataset(4))
    assert (
        cnns.config.maps == "proxy" and choose_maps(cnns.ctx.fed, cnns.ctx.graph, cnns.config)[0] == "proxy"
    )
    assert "exact averaging" in cnns.lam_rule  # the proxies' default: ProxyFL's averaging step
    assert choose_maps(cnns.ctx.fed, cnns.ctx.graph)[0] == "aligned"  # where no proxy is considered
    tabular = build_simulation(RunConfig(clients=4, graph="complete"), dataset=_tabular_without_feature_ids())
    assert tabular.config.maps == "learned" and tabular.config.lam == 0.01
    assert any("features_i" in n and "near local training" in n for n in tabular.diagnose())  # said


def test_python_data_carry_feature_ids_and_auto_couples_the_shared_features() -> None:
    """A client given as a mapping with ``features`` (its columns' ids in one shared space): the
    same ids reach the dataset, ``maps = auto`` picks the feature maps and no fallback is warned."""
    rng = np.random.default_rng(0)
    entries = []
    for k in range(4):
        ids = np.arange(k % 2, 4 + k % 2)[: 3 + k % 2]  # 3 or 4 columns of a 5-feature space
        x, xt = rng.normal(size=(12, len(ids))), rng.normal(size=(4, len(ids)))
        entries.append({"x": x, "y": rng.integers(0, 2, 12), "x_test": xt, "y_test": rng.integers(0, 2, 4)})
        entries[-1]["features"] = ids
    result = sheaf_fmtl.run(data=entries, rounds=2, graph="complete")
    assert result.summary["maps"] == "features" and not result.summary["warnings"]
    loaded = load_user_objects(entries)
    assert [f.tolist() for f in loaded.features] == [e["features"].tolist() for e in entries]
    entries[2] = {**entries[2], "features": entries[2]["features"][:-1]}  # one id short
    with pytest.raises(DatasetError, match="client 2's features must list one integer id per feature"):
        load_user_objects(entries)
    del entries[1]["features"]
    with pytest.raises(DatasetError, match="client i's features is given for some clients but not"):
        load_user_objects(entries)


def test_edge_weights_auto_learn_relatedness_except_between_proxies_and_the_run_records_them() -> None:
    """``edge_weights = auto``: learned weights for the coordinate modes, the graph's for proxies
    (``edge_weights_of`` says which ran, and the coupler learns weights exactly when it says so)."""
    cnns = build_simulation(RunConfig(model="cnn-small,cnn-medium", clients=4), dataset=image_dataset(4))
    assert cnns.config.maps == "proxy" and edge_weights_of(cnns.config) == "graph"
    assert cnns.algorithm.coupler.relate is None  # type: ignore[attr-defined]
    named = RunConfig(model="cnn-small,cnn-medium", clients=4, edge_weights="relatedness")
    asked = build_simulation(named, dataset=image_dataset(4))
    assert edge_weights_of(asked.config) == "relatedness"
    assert asked.algorithm.coupler.relate is not None  # type: ignore[attr-defined]
    for keys, weights in (
        ({"dataset": "synthetic"}, "relatedness"),
        ({"dataset": "synthetic", "map_kind": "gaussian"}, "graph"),  # (relatedness reads selections)
        ({"dataset": "synthetic", "edge_weights": "graph"}, "graph"),
    ):
        sim = build_simulation(RunConfig(clients=6, **keys))  # type: ignore[arg-type]
        assert edge_weights_of(sim.config) == weights and sim.config.edge_weights == keys.get(
            "edge_weights", "auto"
        )
        assert (sim.algorithm.relate is not None) == (weights == "relatedness")  # type: ignore[attr-defined]
        assert not any("edge_weights" in n for n in sim.algorithm.notes)  # type: ignore[attr-defined]


def test_lam_left_open_takes_each_algorithms_default_and_a_given_lam_is_kept() -> None:
    assert default_lam(RunConfig(algorithm="dfedu")) == 0.01
    assert default_lam(RunConfig(maps="learned")) == map_mode_spec("learned").default_lam
    sim = build_simulation(RunConfig(dataset="synthetic", clients=6, lam=0.7))
    assert sim.config.maps == "redrawn" and sim.config.lam == 0.7
    local = build_simulation(RunConfig(dataset="synthetic", clients=6, algorithm="local"))
    assert local.config.lam is None  # local training reads no lam


def test_auto_choosing_a_mode_that_refuses_a_key_says_which_mode_and_why() -> None:
    with pytest.raises(ConfigError, match=r"maps=auto chose maps=features \(.*\), but .*estimates") as err:
        build_simulation(RunConfig(dataset="synthetic-hetero", clients=6, estimates=True))
    assert "\n" not in str(err.value)
