"""The Python API (``sheaf_fmtl.run``): the README's example, validation shared with the CLI,
nothing written without ``out=``, and the result's thetas and maps against the checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig, load_config
from sheaf_fmtl.sheaf.graph import half_edge_matrix

README = Path(__file__).resolve().parents[1] / "README.md"
TINY = {"rounds": 2, "eval_every": 1, "clients": 4, "maps": "learned"}  # the result holds the maps P_ij


def _readme_example() -> str:
    section = README.read_text().split("## Five lines of Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run_readme_example(rounds: int | None, monkeypatch, tmp_path) -> dict:
    monkeypatch.chdir(tmp_path)
    code = _readme_example()
    if rounds is not None:
        assert "rounds=50" in code
        code = code.replace("rounds=50", f"rounds={rounds}")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the documented example itself
    assert list(tmp_path.iterdir()) == []  # no folder written without out=
    return scope


def test_readme_example_runs(monkeypatch, tmp_path):
    scope = _run_readme_example(5, monkeypatch, tmp_path)
    result = scope["result"]
    assert result.metric == "accuracy" and result.summary["rounds"] == 5
    assert result.metrics[-1]["round"] == 5 and "test_accuracy" in result.metrics[-1]
    assert scope["theta"].numel() > 0 and result.summary["maps"] == "features"  # maps=auto's choice


@pytest.mark.slow
def test_readme_example_runs_verbatim(monkeypatch, tmp_path):
    assert _run_readme_example(None, monkeypatch, tmp_path)["result"].summary["rounds"] == 50


def test_run_in_memory_gives_metrics_thetas_and_maps(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = sheaf_fmtl.run(**TINY)
    assert list(tmp_path.iterdir()) == [] and result.out is None
    assert "round" not in capsys.readouterr().err  # no progress bar unless asked
    assert [r["round"] for r in result.metrics] == [0, 1, 2]
    assert result.final == result.metrics[-1]["test_accuracy"] == result.summary["final"]
    assert len(result.thetas) == 4 and result.config.clients == 4
    dims = [t.numel() for t in result.thetas]
    edges = result.state["edges"].tolist()
    assert set(result.maps) == {(i, j) for i, j in edges} | {(j, i) for i, j in edges}
    for (i, j), p in result.maps.items():  # P_ij: [d_ij, d_i], d_ij from gamma (0.3 by default)
        assert p.shape == (max(1, int(0.3 * min(dims[i], dims[j]))), dims[i])


def test_out_writes_the_same_run_folder_as_the_cli(tmp_path):
    result = sheaf_fmtl.run(**TINY, out=tmp_path / "api")
    assert (
        main(
            [
                "run",
                "--set",
                *(f"{k}={v}" for k, v in TINY.items()),
                "--quiet",
                "--out",
                str(tmp_path / "cli"),
            ]
        )
        == 0
    )
    ckpt = torch.load(tmp_path / "cli" / "checkpoint.pt", weights_only=True)
    for i, theta in enumerate(result.thetas):
        assert torch.equal(theta, ckpt["thetas"][i])
    norms = half_edge_matrix(ckpt["map_norms"].numpy(), ckpt["edges"].numpy(), len(ckpt["thetas"]))
    for (i, j), p in result.maps.items():  # the maps against the checkpoint's ||P_ij||_F per half-edge
        assert torch.linalg.matrix_norm(p.float()).item() == pytest.approx(norms[i, j])
    assert (tmp_path / "api" / "metrics.csv").read_text().splitlines()[0].startswith("round,test_accuracy")
    with pytest.raises(ValueError, match="not empty"):
        sheaf_fmtl.run(**TINY, out=tmp_path / "api")
    assert sheaf_fmtl.run(**TINY, out=tmp_path / "api", overwrite=True).final == result.final


def test_the_api_and_the_command_line_dispatch_through_one_function(tmp_path, monkeypatch):
    """``sheaf_fmtl.run`` and ``sheaf-fmtl run`` hand the same config to :func:`launch.dispatch`
    (which starts ``processes = K`` ranks for both)."""
    from sheaf_fmtl.runtime.run.launching import launch

    seen = []

    def record(config, out, **options):  # noqa: ANN001, ANN003, ANN202
        seen.append((config.to_dict(), out))
        return {"status": "finished"}  # rank 0's summary after K processes

    monkeypatch.setattr(launch, "dispatch", record)
    monkeypatch.setattr("sheaf_fmtl.api.read_result", lambda out: out)
    monkeypatch.setattr("sheaf_fmtl.cli.run._report", lambda summary, out: 0)
    keys = {**TINY, "processes": 2}
    out = tmp_path / "run"
    sheaf_fmtl.run(**keys, out=out)
    assert main(["run", "--set", *(f"{k}={v}" for k, v in keys.items()), "--quiet", "--out", str(out)]) == 0
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0][0]["processes"] == 2


def test_python_objects_and_processes_are_refused_in_one_line(tmp_path):
    data = [(torch.randn(8, 3), torch.randint(0, 2, (8,)), torch.randn(4, 3), torch.randint(0, 2, (4,)))] * 3
    with pytest.raises(ConfigError, match="cannot re-create the Python objects given as dataset") as e:
        sheaf_fmtl.run(data=data, graph="complete", rounds=1, processes=2, out=tmp_path / "run")
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


BAD = [("lam", -1), ("alpha", float("nan")), ("eval_every", 0), ("bogus", 1)]


@pytest.mark.parametrize("key, value", BAD)
def test_api_rejects_what_the_cli_rejects_with_the_same_words(tmp_path, monkeypatch, capsys, key, value):
    """The same words, each in its reader's spelling: the API's refusal written as on the command
    line (:func:`sheaf_fmtl.spelling.command_line`, with ``run``'s flags) is the command line's."""
    from sheaf_fmtl.commandline import COMMON_FLAGS
    from sheaf_fmtl.spelling import command_line

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as raised:
        sheaf_fmtl.run(**{key: value})
    assert "--" not in str(raised.value)
    with command_line({k: flag for flag, k, _, _ in COMMON_FLAGS}), pytest.raises(ConfigError) as spelled:
        sheaf_fmtl.run(**{key: value})
    assert main(["run", "--set", f"{key}={value}"]) == 2
    assert capsys.readouterr().err.strip() == f"sheaf-fmtl: error: {spelled.value}"
    assert list(tmp_path.iterdir()) == []


def test_config_object_mapping_and_yaml_path_agree(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lam: 0.5\ndata:\n  relatedness: 0.2\n")
    from sheaf_fmtl.api import resolve_config

    want = load_config(f, ["rounds=7", "data.groups=2"])
    extra = {"rounds": 7, "data": {"groups": 2}}
    assert resolve_config(f, **extra) == want
    assert resolve_config({"lam": 0.5, "data": {"relatedness": 0.2}}, **extra) == want
    assert resolve_config(load_config(f), **extra) == want
    assert resolve_config(lam=0.5, rounds=7, data={"relatedness": 0.2, "groups": 2}) == want
    with pytest.raises(ConfigError, match="must be a RunConfig"):
        resolve_config(3)


def test_runconfig_validates_in_its_constructor_and_replace():
    with pytest.raises(ConfigError, match="lam >= 0"):
        RunConfig(lam=-1)
    with pytest.raises(ConfigError, match="eval_every >= 1"):
        RunConfig(eval_every=0)
    with pytest.raises(ConfigError, match="not a finite number"):
        RunConfig(alpha=float("inf"))
    c = RunConfig(lam=1)
    assert c.lam == 1.0 and isinstance(c.lam, float)
    assert c.replace(alpha=0.1).alpha == 0.1
    with pytest.raises(ConfigError, match="gamma"):
        c.replace(gamma=2)
    with pytest.raises(ConfigError, match="unknown config key 'lamda'"):
        c.replace(lamda=1)


def test_to_pandas_or_a_clear_import_error(monkeypatch):
    result = sheaf_fmtl.run(**TINY)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            result.to_pandas()
    else:
        frame = result.to_pandas()
        assert list(frame["round"]) == [0, 1, 2] and "test_accuracy" in frame


def test_special_cases_are_config_keys_and_the_result_says_how_they_ran():
    result = sheaf_fmtl.run(dataset="synthetic", topology="personalised-fl", **TINY)
    assert result.config.eta == 0 and result.config.topology == "personalised-fl"
    assert result.summary["num_clients"] == TINY["clients"] + 1  # the data-less server node
    assert result.config.clients == TINY["clients"]  # rerunning the saved config gives the same run
    assert result.summary["per_client"][0] is None  # the server has no test data
