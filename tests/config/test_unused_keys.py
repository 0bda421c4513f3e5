"""One rule for keys a run does not read, whatever their source (``--set``, a config file, Python
keywords): one warning line naming them, pointed at the caller's line, the run goes on, and they are
listed under ``unused:`` in the saved ``config.yaml``, which reading ignores (so resume and grouping
work as before)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import RunConfig, load_config
from sheaf_fmtl.config.registry import map_mode_names
from sheaf_fmtl.config.usage import SELECTORS, UnusedKeysWarning, read_by, unused_keys
from sheaf_fmtl.metrics.groups import group_by_config
from sheaf_fmtl.runtime.run.launching.resume import resume_config

TINY = ["rounds=2", "eval_every=1", "clients=4", "dataset=synthetic"]


def _numbers(metrics: Path) -> list[list[str]]:
    """``metrics.csv`` without its wall-clock column."""
    rows = [line.split(",") for line in metrics.read_text().splitlines()]
    clock = rows[0].index("wall_seconds")
    return [row[:clock] + row[clock + 1 :] for row in rows]


@pytest.mark.parametrize(
    "keys, unused",
    [
        (
            {"maps": "redrawn", "eta": 0.5, "map_init": "orthogonal", "map_scale": 0.3},
            ["eta", "map_init", "map_scale"],
        ),
        (
            {"maps": "redrawn", "map_dtype": "bfloat16", "message_mode": "literal"},
            ["message_mode", "map_dtype"],
        ),
        ({"maps": "fixed", "eta": 0.5}, ["eta"]),
        ({"maps": "fixed", "gamma": 0.5, "map_scale": 0.3}, []),
        ({"maps": "features", "gamma": 0.5}, ["gamma"]),
        ({"maps": "learned", "eta": 0.5, "gamma": 0.5, "map_defer": 3}, []),
        ({"algorithm": "local", "lam": 0.3, "eta": 0.2}, ["eta", "lam"]),
        (
            {"algorithm": "dfedu", "lam": 0.3, "dpsgd_order": "atc", "inner_lr": 0.1},
            ["dpsgd_order", "inner_lr"],
        ),
        ({"algorithm": "dpsgd", "dpsgd_order": "atc"}, []),
        ({"algorithm": "pfedme", "inner_steps": 3, "perfedavg_beta": 0.5}, ["perfedavg_beta"]),
        (
            {"algorithm": "fedavg", "finetune_epochs": 3, "personal_layers": 2},
            ["finetune_epochs", "personal_layers"],
        ),
        ({"algorithm": "fedavg-ft", "finetune_epochs": 3, "dpsgd_order": "atc"}, ["dpsgd_order"]),
        ({"algorithm": "dpsgd-ft", "finetune_epochs": 3, "dpsgd_order": "atc"}, []),
        ({"algorithm": "partial", "personal_layers": 2, "finetune_epochs": 2}, ["finetune_epochs"]),
        ({"graph": "complete", "graph_p": 0.5, "graph_k": 6}, ["graph_p", "graph_k"]),
        ({"graph": "watts-strogatz", "graph_p": 0.5, "graph_k": 6, "graph_m": 3}, ["graph_m"]),
        ({"local_epochs": 1, "local_steps": 3}, ["local_steps"]),
        ({"local_epochs": 0, "local_steps": 3}, []),
        ({"eta": 0.01, "maps": "redrawn"}, []),  # the default value: nothing was set
        ({"topology": "conventional-fmtl", "eta": 0.5}, []),  # a special case sets the maps' keys itself
    ],
)
def test_which_keys_a_run_ignores(keys: dict, unused: list[str]) -> None:
    assert unused_keys(RunConfig(**keys)) == unused


def test_the_table_names_real_keys_and_selector_values() -> None:
    known = set(RunConfig().to_dict())
    allowed = {"maps": map_mode_names(), "local_epochs": ("0",)}
    for key, (selector, readers) in read_by().items():
        assert key in known and selector in SELECTORS
        if selector in allowed:
            assert set(readers) <= set(allowed[selector]), key
    assert SELECTORS["maps"](RunConfig(algorithm="dfedu")).startswith("none")


def test_auto_decides_nothing_until_resolved(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(SELECTORS, "maps", lambda c: "auto")
    assert unused_keys(RunConfig(eta=0.5, map_init="orthogonal")) == []


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["--set", "maps=redrawn", "eta=0.5", "map_init=orthogonal"],
            "'eta' = 0.5 is not used with maps=redrawn",
        ),
        (
            ["--set", "maps=fixed", "eta=0.5"],
            "'eta' = 0.5 is not used with maps=fixed (read with maps=learned only)",
        ),
        (["--set", "algorithm=local", "lam=0.3"], "'lam' = 0.3 is not used with algorithm=local"),
        (["--set", "algorithm=fedavg", "lam=0.3"], "'lam' = 0.3 is not used"),
        (["--set", "graph=complete", "graph_p=0.5"], "'graph_p' = 0.5 is not used with graph=complete"),
    ],
)
def test_typed_unused_keys_are_warned_in_one_line_and_the_run_goes_on(
    tmp_path,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
    argv,  # noqa: ANN001
    fragment,  # noqa: ANN001
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", *argv, "--set", *TINY, "--out", "r", "--quiet"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(err) == 1 and err[0].startswith("sheaf-fmtl: warning: config key ") and fragment in err[0], err
    key = fragment.split("'")[1]
    assert key in yaml.safe_load(Path("r/config.yaml").read_text())["unused"]


def test_a_shell_loop_over_algorithms_with_common_keys_runs(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
) -> None:
    """``for a in local dfedu sheaf-fmtl; do sheaf-fmtl run --set gamma=0.1 algorithm=$a ...``: every
    run goes on; those that ignore ``gamma`` say so once, in one line; the one reading it says nothing."""
    monkeypatch.chdir(tmp_path)
    common = ["dataset=synthetic-clusters", "data.homogeneous=true", "clients=6", "rounds=1", "gamma=0.1"]
    lines = {}
    for algorithm in ("local", "dfedu", "sheaf-fmtl"):
        assert main(["run", "--set", *common, f"algorithm={algorithm}", "--out", algorithm, "--quiet"]) == 0
        lines[algorithm] = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    for algorithm in ("local", "dfedu"):
        assert len(lines[algorithm]) == 1 and "'gamma' = 0.1 is not used" in lines[algorithm][0], lines
        assert yaml.safe_load(Path(algorithm, "config.yaml").read_text())["unused"] == ["gamma"]
    assert lines["sheaf-fmtl"] == []
    assert "unused" not in yaml.safe_load(Path("sheaf-fmtl", "config.yaml").read_text())


def test_dfedu_on_models_of_different_sizes_names_the_homogeneous_variant(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--set", "dataset=synthetic-clusters", "algorithm=dfedu", "clients=6", "rounds=1"]
    assert main([*argv, "--out", "r", "--quiet"]) == 2
    assert "add data.homogeneous=true" in capsys.readouterr().err


def test_save_maps_is_one_rule_under_auto_and_redrawn(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
) -> None:
    """``maps=auto`` resolved to ``redrawn`` ignores ``save_maps`` as ``maps=redrawn`` does."""
    monkeypatch.chdir(tmp_path)
    warnings.simplefilter("always")  # Python shows one text from one line once; here both are wanted
    for maps in ("auto", "redrawn"):
        assert main(["run", "--set", *TINY, f"maps={maps}", "save_maps=false", "--out", maps, "--quiet"]) == 0
        err = capsys.readouterr().err
        assert "'save_maps' = False is not used with maps=redrawn" in err, err
        assert yaml.safe_load(Path(maps, "config.yaml").read_text())["unused"] == ["save_maps"]


def test_unused_keys_from_a_file_are_warned_recorded_and_resume_still_works(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("shared.yaml").write_text("maps: redrawn\neta: 0.5\nmap_scale: 0.2\ncheckpoint_every: 1\n")
    assert main(["run", "shared.yaml", "--set", *TINY, "--out", "r", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "sheaf-fmtl: warning: config key 'eta' = 0.5 is not used with maps=redrawn" in err
    assert "also unused: map_scale" in err and "under 'unused'" in err
    saved = yaml.safe_load(Path("r/config.yaml").read_text())
    assert saved["unused"] == ["eta", "map_scale"] and saved["eta"] == 0.5
    ran = [
        *TINY,
        f"lam={json.loads(Path('r/summary.json').read_text())['lam']}",
    ]  # the lam that ran (null: the rule's)
    assert load_config("r/config.yaml") == load_config("shared.yaml", ran)  # the reader ignores the list
    # the same run from a file that leaves them out: the same numbers, one experiment when grouped
    Path("plain.yaml").write_text("maps: redrawn\ncheckpoint_every: 1\n")
    assert main(["run", "plain.yaml", "--set", *TINY, "--out", "p", "--quiet"]) == 0
    capsys.readouterr()
    assert _numbers(Path("r/metrics.csv")) == _numbers(Path("p/metrics.csv"))
    assert len(group_by_config(["r", "p"])) == 1
    resumed = resume_config("r", ["rounds=3"])  # what --resume compares: the saved config, unchanged
    assert resumed == load_config("shared.yaml", [*ran, "rounds=3"])


def test_python_runs_warn_as_they_may_share_keys_across_algorithms(tmp_path: Path) -> None:
    """``for alg in algorithms: fed.run(algorithm=alg, **common)``: the keys a run ignores are
    named, and recorded, not refused."""
    with pytest.warns(UnusedKeysWarning, match="'eta' = 0.5 is not used with maps=redrawn"):
        sheaf_fmtl.run(maps="redrawn", eta=0.5, rounds=1, clients=4, dataset="synthetic", out=tmp_path / "k")
    config = RunConfig(algorithm="local", lam=0.3, rounds=1, clients=4, dataset="synthetic")
    with pytest.warns(UnusedKeysWarning, match="'lam' = 0.3 is not used with algorithm=local"):
        sheaf_fmtl.run(config, out=tmp_path / "r")
    assert yaml.safe_load((tmp_path / "k" / "config.yaml").read_text())["unused"] == ["eta"]
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["unused"] == ["lam"]


def test_the_warning_points_at_the_callers_line(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sheaf_fmtl.run(algorithm="local", lam=0.3, rounds=1, clients=4, dataset="synthetic", out=tmp_path)
    unused = [w for w in caught if issubclass(w.category, UnusedKeysWarning)]
    assert len(unused) == 1 and Path(unused[0].filename).resolve() == Path(__file__).resolve()
