"""The models a validation split chose are scored on the test split too: ``summary.json``'s
``best_test_<metric>``, ``sheaf-fmtl evaluate RUN --round best`` and ``load(run).evaluate()``, each
the run's own evaluation of those models on the test data (read as the run read them)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

import sheaf_fmtl
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError, RunConfig
from sheaf_fmtl.data.base import RawClient, RawFederated
from sheaf_fmtl.data.protocol import ProtocolOptions, apply_protocol
from sheaf_fmtl.runtime.run.scoring.scoring import folder_config, score

pytestmark = pytest.mark.filterwarnings("ignore:synthetic.*one class:UserWarning")

TINY = {"dataset": "synthetic", "clients": 4, "rounds": 5, "eval_every": 1, "batch_size": 8}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run that early stopping watched on a validation split (or ran to its end)."""
    out = tmp_path_factory.mktemp("scoring") / "run"
    sheaf_fmtl.run(out=out, validation=0.3, early_stop_patience=2, **TINY)
    return out


def test_the_kept_test_split_is_the_test_data_beside_the_validated_training_data() -> None:
    rng = np.random.default_rng(0)
    clients = tuple(RawClient(rng.normal(size=(40, 3)), rng.integers(0, 2, 40)) for _ in range(3))
    raw = RawFederated("t", "classification", 2, clients)

    def split(standardize: bool, validation: float, keep_test: bool = False):  # noqa: ANN202
        return apply_protocol(
            raw, 1, ProtocolOptions(standardize=standardize, validation=validation, keep_test=keep_test)
        )

    plain, validated, kept = split(False, 0.0), split(False, 0.25), split(False, 0.25, True)
    scaled, stats = split(True, 0.25, True), split(True, 0.25).standardization
    assert stats is not None
    for i in range(3):
        assert np.array_equal(
            kept.clients[i].x_train, validated.clients[i].x_train
        )  # the run's training data
        assert np.array_equal(kept.clients[i].x_test, plain.clients[i].x_test)  # the test data
        assert len(validated.clients[i].y_test) != len(plain.clients[i].y_test)  # (not the validation split)
        mean, std = stats[i]  # standardised with the validated run's training statistics
        assert np.allclose(scaled.clients[i].x_test, (plain.clients[i].x_test - mean) / std, atol=1e-5)


def test_a_run_on_the_test_split_scores_as_it_evaluated(tmp_path: Path) -> None:
    result = sheaf_fmtl.run(out=tmp_path / "r", **TINY)
    scored = sheaf_fmtl.load(tmp_path / "r").evaluate()
    assert scored["split"] == "test" and scored["metric"] == "accuracy" and scored["round"] is None
    assert scored["mean"] == pytest.approx(result.final, abs=1e-6)
    assert scored["per_client"] == pytest.approx(result.summary["per_client"], abs=1e-6)
    assert "best_test_accuracy" not in result.summary  # its evaluations were on test already
    with pytest.raises(ConfigError, match="validation = 0"):
        score(result.config, result.thetas, "validation")
    with pytest.raises(ValueError, match="allowed: test, validation"):
        score(result.config, result.thetas, "train")


def test_the_best_models_are_scored_on_test(stopped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    summary = json.loads((stopped / "summary.json").read_text())
    best = sheaf_fmtl.load(stopped, round="best")
    on_test, on_val = best.evaluate(), best.evaluate("validation")
    assert summary["best_round"] == summary["best"]["round"] == best.round == on_test["round"]
    assert on_test["mean"] == pytest.approx(summary["best_test_accuracy"], abs=1e-6)
    assert on_test["per_client"] == pytest.approx(summary["best_test_per_client"], abs=1e-6)
    assert on_val["mean"] == pytest.approx(summary["best"]["value"], abs=1e-6)  # what chose them
    assert main(["evaluate", str(stopped), "--round", "best"]) == 0
    line = capsys.readouterr().out
    assert f"best models (round {best.round}): mean test accuracy = {on_test['mean']:.4f} over 4 of 4" in line
    assert main(["evaluate", str(stopped), "--split", "validation", "--json"]) == 0
    final = json.loads(capsys.readouterr().out)
    assert final["round"] is None and final["mean"] == pytest.approx(summary["final"], abs=1e-6)


def test_a_folder_naming_code_is_scored_only_when_trusted(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**RunConfig().to_dict(), "metric": "mymod:score"}))
    with pytest.raises(ConfigError, match=r"names code \(metric = mymod:score\).*trust_plugins=True"):
        folder_config(tmp_path, {}, trust=False)
    assert main(["evaluate", str(tmp_path / "nothing")]) == 2


def test_clients_that_never_joined_are_left_out_as_the_summary_leaves_them_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A late joiner whose round never came: evaluate's mean and count are summary.json's."""
    import json

    out = tmp_path / "late"
    sheaf_fmtl.run(out=out, **{**TINY, "rounds": 3}, join_round="late:2@50")
    summary = json.loads((out / "summary.json").read_text())
    scored = sheaf_fmtl.load(out).evaluate()
    assert scored["mean"] == pytest.approx(summary["final"], abs=1e-6)
    assert [v is None for v in scored["per_client"]] == [v is None for v in summary["per_client"]]
    assert scored["clients"] == sum(v is not None for v in summary["per_client"]) == 2
    assert scored["not_joined"] == 2
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][-2:] == ["wall_seconds", "clients_present"] and rows[0][1] == "test_accuracy"
    assert [r[-1] for r in rows[1:]] == ["2"] * 4  # rounds 0 .. 3, the same two clients
    assert main(["evaluate", str(out)]) == 0
    line = capsys.readouterr().out
    assert f"= {summary['final']:.4f} over 2 of 4 clients (2 not joined yet)" in line


def test_a_client_that_joined_before_the_last_round_is_scored(tmp_path: Path) -> None:
    """Joined at round 2 of 3: present at the last evaluation, so scored; every client counted."""
    import json

    out = tmp_path / "joined"
    sheaf_fmtl.run(out=out, **{**TINY, "rounds": 3}, join_round="0,2,0,3")
    summary = json.loads((out / "summary.json").read_text())
    scored = sheaf_fmtl.load(out).evaluate()
    assert None not in summary["per_client"] and scored["clients"] == 4 and scored["not_joined"] == 0
    with open(out / "metrics.csv", newline="") as f:
        present = [r["clients_present"] for r in csv.DictReader(f)]
    assert present == ["2", "2", "3", "4"]  # rounds 0 .. 3: client 1 from round 2, client 3 from 3
    assert scored["mean"] == pytest.approx(summary["final"], abs=1e-6)


def test_a_run_where_no_client_has_joined_reports_no_mean_everywhere(tmp_path: Path) -> None:
    """Every client joins after the last round: no mean (null, not NaN) in summary.json and evaluate."""
    import json

    out = tmp_path / "nobody"
    sheaf_fmtl.run(out=out, **{**TINY, "rounds": 2}, join_round="late:4@50")
    summary = json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    scored = sheaf_fmtl.load(out).evaluate()
    assert summary["final"] is None and scored["mean"] is None and scored["clients"] == 0
    assert summary["per_client"] == scored["per_client"] == [None] * 4 and scored["not_joined"] == 4


@pytest.mark.parametrize("rounds", ["3", None, -1, True, 1e30])
def test_a_summary_without_a_number_of_rounds_is_refused_when_scoring(tmp_path: Path, rounds: object) -> None:
    import json

    from sheaf_fmtl.data.base import DatasetError

    out = tmp_path / "r"
    sheaf_fmtl.run(out=out, **{**TINY, "rounds": 1})
    trained = sheaf_fmtl.load(out)
    trained.summary["rounds"] = rounds
    with pytest.raises(DatasetError, match=r"summary.json: rounds_done / rounds = .* is not a number") as err:
        trained.evaluate()
    assert "\n" not in str(err.value)
    assert json.loads((out / "summary.json").read_text())["rounds"] == 1  # (the file is unchanged)
