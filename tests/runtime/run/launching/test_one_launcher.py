"""One way to start a run: ``sheaf-fmtl run`` (and ``--resume``), ``run --seeds``, ``sweep``,
``reproduce`` and its frontier, ``demo``, ``sheaf_fmtl.run`` (and ``resume=``) and a
``Federation``'s run each hand their run to :func:`launch`, which gives every one of them the same
process layout: a rank of torchrun is that rank, with the caller's callbacks; what ranks cannot be
handed is refused in one line."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.experiments import frontier as fr
from sheaf_fmtl.experiments import reproduce as rep
from sheaf_fmtl.runtime.run.launching import launch as launch_module
from sheaf_fmtl.runtime.run.launching.launch import Resume, launch

from ....experiments.test_reproduce import SUBSTITUTE

KEYS = {"clients": 4, "rounds": 2, "eval_every": 1}
SETS = [a for k, v in KEYS.items() for a in ("--set", f"{k}={v}")]
DEMO_CONFIG = Path(__file__).resolve().parents[4] / "configs" / "demo.yaml"


class Reached(BaseException):
    """Raised by the stand-in launcher: the command got there (no handler of a command catches it)."""


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any, dict[str, Any]]]:
    """The runs handed to the launcher; the first ends the command."""
    calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def stand_in(run: Any, out: Any, **options: Any) -> None:  # noqa: ANN401
        calls.append((run, out, options))
        raise Reached

    monkeypatch.setattr(launch_module, "launch", stand_in)
    return calls


def _reaches(launched: list[tuple[Any, Any, dict[str, Any]]], start: Any) -> tuple[Any, Any, dict[str, Any]]:  # noqa: ANN401
    with pytest.raises(Reached):
        start()
    assert len(launched) == 1
    return launched.pop()


def test_every_command_and_the_api_start_their_runs_through_the_launcher(
    launched: list[tuple[Any, Any, dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run, out, options = _reaches(launched, lambda: main(["run", *SETS, "--quiet", "--out", "one"]))
    assert isinstance(run, RunConfig) and run.rounds == 2 and out == Path("one") and options["build"]
    run, out, _ = _reaches(launched, lambda: main(["run", "--resume", "one", "--set", "rounds=4"]))
    assert isinstance(run, Resume) and run.overrides == ["rounds=4"] and out == Path("one")
    run, out, _ = _reaches(
        launched, lambda: main(["run", "--seeds", "0,1", "--quiet", *SETS, "--out", "seeds"])
    )
    assert run.seed == 0 and out == Path("seeds") / "seed0"
    sweep = ["sweep", "--grid", "lam=0.01,0.1", "--validation", "0.3", "--quiet", *SETS, "--out", "sweep"]
    run, out, _ = _reaches(launched, lambda: main(sweep))
    assert run.lam == 0.01 and out.parent == Path("sweep") / "cells"
    demo = ["demo", str(DEMO_CONFIG), "--out", "demo", "--quiet", *SETS]
    run, out, _ = _reaches(launched, lambda: main(demo))
    assert out == Path("demo") / "heterogeneous" / "sheaf-fmtl-features"
    options = {"quick": True, "seeds": 1, "substitute": SUBSTITUTE, "progress": False, "estimate": False}
    run, out, _ = _reaches(launched, lambda: rep.reproduce("heterogeneous", tmp_path / "rep", **options))
    assert run.dataset == "synthetic" and (tmp_path / "rep" / "cells") in out.parents
    small = {"dataset": "synthetic", "clients": 6, "rounds": 4, "eval_every": 2, "graph_p": 0.6}
    monkeypatch.setattr(fr, "PROBLEMS", {"tiny": (small, "tiny")})
    run, out, _ = _reaches(launched, lambda: fr.frontier(tmp_path / "frontier", quick=True, progress=False))
    assert (tmp_path / "frontier" / "cells" / "tiny") in out.parents
    run, out, options = _reaches(launched, lambda: sheaf_fmtl.run(**KEYS, out="api", callbacks=[print]))
    assert isinstance(run, RunConfig) and out == Path("api") and options["callbacks"] == [print]
    run, out, _ = _reaches(launched, lambda: sheaf_fmtl.run(resume="api", rounds=4, trust_plugins=True))
    assert run == Resume(keys={"rounds": 4}, trust=True) and out == Path("api")
    data = [(torch.randn(8, 3), torch.randint(0, 2, (8,)), torch.randn(4, 3), torch.randint(0, 2, (4,)))] * 3
    fed = sheaf_fmtl.Federation(data=data, graph="complete")
    run, out, _ = _reaches(launched, lambda: fed.run(rounds=1, out="fed"))
    assert run.rounds == 1 and run.dataset.startswith("<python") and out == Path("fed")


def test_as_a_rank_of_torchrun_the_api_runs_that_rank_with_its_callbacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sheaf_fmtl.run`` under torchrun is one rank, as ``sheaf-fmtl run`` is; rank 1 returns the
    config alone (rank 0 holds the results)."""
    ranks = []

    def rank(config: RunConfig, out: Path, **options: Any) -> None:  # noqa: ANN401
        ranks.append((config, out, options))

    monkeypatch.setattr(launch_module, "run_rank", rank)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    result = sheaf_fmtl.run(**KEYS, out=tmp_path / "run", callbacks=[print])
    [(config, out, options)] = ranks
    assert out == tmp_path / "run" and options["callbacks"] == [print] and config.rounds == 2
    assert result.config == config and result.summary == {} and result.metrics == []
    with pytest.raises(ConfigError, match="one of 2 ranks: the ranks hand their results over") as e:
        sheaf_fmtl.run(**KEYS)
    assert "\n" not in str(e.value)


def test_ranks_are_refused_what_they_cannot_be_handed(tmp_path: Path) -> None:
    two = sheaf_fmtl.api.resolve_config(**KEYS, processes=2)
    with pytest.raises(ConfigError, match="'processes' = 2: the ranks hand their results over"):
        launch(two, None, progress=False)
    with pytest.raises(ConfigError, match="'processes' = 2: callbacks run in this process"):
        launch(two, tmp_path / "a", progress=False, callbacks=[print])
    with pytest.raises(ConfigError, match="'processes' = 2: a simulation built in this process"):
        launch(two, tmp_path / "b", progress=False, sim=object())  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


def test_a_federation_passes_on_the_keywords_of_sheaf_fmtl_run() -> None:
    keywords = inspect.signature(sheaf_fmtl.run).parameters.values()
    assert sheaf_fmtl.api.RUN_OPTIONS == tuple(p.name for p in keywords if p.kind is p.KEYWORD_ONLY)
