"""``sheaf-fmtl bench`` end to end (smoke settings; ``--quick`` is marked slow)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from sheaf_fmtl.bench.harness import run_bench
from sheaf_fmtl.bench.measure import rss_bytes
from sheaf_fmtl.bench.rounds import frozen_gradients
from sheaf_fmtl.bench.scaling import linear_fit
from sheaf_fmtl.bench.settings import SMALL, setting_named
from sheaf_fmtl.bench.synthetic import build
from sheaf_fmtl.cli import main
from sheaf_fmtl.metrics.memory import peak_rss_bytes

SUMMARY = re.compile(r"^(\S+): floor ratio [\d.]+, speed-up [\d.]+, memory ratio [\d.]+$", re.M)


def test_linear_fit() -> None:
    fit = linear_fit([1, 2, 3, 4], [3, 5, 7, 9])
    assert (
        fit["slope"] == pytest.approx(2)
        and fit["intercept"] == pytest.approx(1)
        and fit["r2"] == pytest.approx(1)
    )


def test_setting_named_knows_every_setting_and_refuses_others() -> None:
    assert setting_named("small") is SMALL
    with pytest.raises(ValueError, match="unknown bench setting 'tiny'; known: small, paper"):
        setting_named("tiny")


def test_rss_is_at_most_its_peak() -> None:
    assert 0 < rss_bytes() <= peak_rss_bytes()


def test_gradient_source_replaces_the_minibatch_gradients() -> None:
    """With zero gradients from a source and no coupling (``lam = 0``) a round leaves every theta
    as it was (hand computation: ``theta - alpha * 0``); without the source the same round moves it."""
    sim = build(dataclasses.replace(SMALL, clients=4, graph_p=1.0, samples=40, lam=0.0))
    before = [t.clone() for t in sim.state.thetas]
    sim.ctx.gradient_source = lambda thetas: ([torch.zeros_like(t) for t in thetas], torch.zeros(4))
    sim.step()
    assert all(torch.equal(a, b) for a, b in zip(before, sim.state.thetas, strict=True))
    sim.ctx.gradient_source = None
    sim.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, sim.state.thetas, strict=True))


def test_frozen_gradients_reuse_one_draw_and_restore_the_batches() -> None:
    sim = build(dataclasses.replace(SMALL, clients=4, graph_p=1.0, samples=40))
    twin = build(dataclasses.replace(SMALL, clients=4, graph_p=1.0, samples=40))
    thetas = sim.state.thetas
    expected, _ = twin.ctx.stochastic_gradients(thetas)  # the draw frozen_gradients takes on entry
    with frozen_gradients(sim):
        first, _ = sim.ctx.stochastic_gradients(thetas)
        second, _ = sim.ctx.stochastic_gradients([t + 1 for t in thetas])
        assert all(a is b for a, b in zip(first, second, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(first, expected, strict=True))
    assert sim.ctx.gradient_source is None
    after, _ = sim.ctx.stochastic_gradients(thetas)  # the next batches, as the twin draws them
    assert all(
        torch.equal(a, b) for a, b in zip(after, twin.ctx.stochastic_gradients(thetas)[0], strict=True)
    )


@pytest.mark.slow  # (its process or its size: make test-slow, CI's second step)
def test_bench_smoke_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--smoke", "--threads", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert set(SUMMARY.findall(out)) == {"small-smoke", "cnn-smoke"}
    assert (
        "loop reference was timed on" in out
    )  # the cnn setting times the reference on a subset, and says so
    assert "cohort:" in out and "copy bandwidth" in out
    data = json.loads((tmp_path / "bench.json").read_text())
    assert (tmp_path / "scaling.png").stat().st_size > 0
    for r in data["settings"].values():
        assert r["s_per_round"] > 0 and r["bytes"]["maps"] > 0 and r["peak_rss"] > r["rss_after_imports"]
        assert r["summary"]["floor_ratio"] > 0 and r["reference"]["s_per_round"] > 0
    assert data["kernel"]["kernel_sha256"]
    assert data["cohort"]["max_rel_diff"] < 1e-2


@pytest.mark.slow
def test_bench_quick(tmp_path: Path) -> None:
    results = run_bench(quick=True, out=tmp_path)
    assert set(SUMMARY.findall(results["report"])) == {"small", "paper-quick"}
