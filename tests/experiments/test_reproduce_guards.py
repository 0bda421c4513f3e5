"""``sheaf-fmtl reproduce``'s guards, fed hostile input: ``--data-dir`` is where every experiment
(the frontier too) looks for its data, a request none of whose data is there is refused in one
line, and ``--seeds`` below 1 or absurd is refused before any tuning or run. Nothing trains here:
the runners are replaced by recorders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.data.registry import dataset_files
from sheaf_fmtl.experiments import frontier as fr
from sheaf_fmtl.experiments import reproduce as rep
from sheaf_fmtl.experiments.paper import EXPERIMENTS

from ..conftest import NO_DATA, shared_data_dir

NAMES = [*sorted(EXPERIMENTS), "frontier"]


def _data_folder(root: Path) -> Path:
    """A folder holding a file under the first name each file-based dataset is looked for by."""
    for names in dataset_files().values():
        path = root / names[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    return root


class Recorder:
    """Stands in for the runners: what reached them (experiment or problem -> cells or seeds)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cells: dict[str, list[Any]] = {}
        self.missing: dict[str, dict[str, str]] = {}
        self.points: list[tuple[str, tuple[int, ...]]] = []
        monkeypatch.setattr(rep, "_run_experiment", self.experiment)
        monkeypatch.setattr(fr, "tune_and_test", self.point)

    def experiment(self, exp: Any, cells: Any, missing: Any, out: Path, **_: Any) -> tuple[bool, list[Path]]:  # noqa: ANN401
        self.cells[exp.name], self.missing[exp.name] = list(cells), dict(missing)
        return False, []

    def point(self, problem: str, method: Any, level: Any, out: Path, seeds: Any, *_: Any) -> fr.Point:  # noqa: ANN401
        self.points.append((problem, tuple(seeds)))
        return fr.Point(problem, method, level, None, {}, [])  # type: ignore[arg-type]


@pytest.fixture
def no_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No ``$SHEAF_FMTL_DATA`` and an empty working folder (the user data folder is empty too)."""
    monkeypatch.delenv("SHEAF_FMTL_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _reproduce(name: str, *extra: str, out: str = "out") -> int:
    return main(["reproduce", name, "--quick", "--quiet", "--out", out, *extra])


@pytest.mark.parametrize("name", NAMES)
def test_data_dir_is_where_every_experiment_finds_its_data(
    no_env: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    data = _data_folder(no_env / "data")
    runs = Recorder(monkeypatch)
    assert _reproduce(name, "--data-dir", str(data), "--seeds", "1") == 0
    if name == "frontier":
        assert {p for p, _ in runs.points} == set(fr.PROBLEMS)
        return
    assert runs.missing == {name: {}}
    exp = EXPERIMENTS[name]
    assert {c.dataset for c in runs.cells[name]} == set(exp.datasets)
    assert {c.config.data_dir for c in runs.cells[name]} == {str(data)}


def test_the_flag_is_the_source_of_truth_and_the_variable_the_fallback(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, empty = _data_folder(no_env / "data"), no_env / "empty"
    empty.mkdir()
    monkeypatch.setenv("SHEAF_FMTL_DATA", str(empty))
    assert fr.missing_data(["school"], [f"data_dir={data}"], quick=True) == {}
    monkeypatch.setenv("SHEAF_FMTL_DATA", str(data))
    assert fr.missing_data(["school"], [], quick=True) == {}  # no flag: the variable
    (note,) = fr.missing_data(["school"], [f"data_dir={empty}"], quick=True).values()
    assert f"searched {empty}" in note and f"--dest {empty}" in note  # the flag wins over the variable
    cells, missing = rep.plan(
        EXPERIMENTS["curves"], [0], datasets=["school"], overrides=[f"data_dir={empty}"]
    )
    assert not cells and f"searched {empty}" in missing["school"]


def test_the_real_data_folder_given_as_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shared_data_dir()
    if real is None:
        pytest.skip(NO_DATA)
    monkeypatch.delenv("SHEAF_FMTL_DATA")  # the folder reaches the command through the flag only
    monkeypatch.chdir(tmp_path)
    runs = Recorder(monkeypatch)
    assert _reproduce("frontier", "--datasets", "school", "--data-dir", real, "--seeds", "1") == 0
    assert runs.points and {p for p, _ in runs.points} == {"school"}


@pytest.mark.parametrize(
    "name, datasets", [("frontier", "school,vehicle,rmnist"), ("curves", "gleam,school"), ("all", "")]
)
def test_nothing_to_run_is_one_line_naming_the_data_and_how(
    no_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    datasets: str,
) -> None:
    runs = Recorder(monkeypatch)
    empty = no_env / "empty"
    empty.mkdir()
    extra = ["--datasets", datasets] if datasets else []
    assert _reproduce(name, *extra, "--data-dir", str(empty)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    wanted = datasets.split(",") if datasets else ["rmnist", "hcifar10", "vehicle", "har", "school", "gleam"]
    assert all(ds in err for ds in wanted) and f"searched {empty}" in err, err
    assert f"sheaf-fmtl data fetch NAME --dest {empty}" in err and "nothing ran" in err
    assert not runs.cells and not runs.points and not (no_env / "out").exists()


def test_without_the_flag_the_refusal_says_how_to_give_it(
    no_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _reproduce("frontier", "--datasets", "school") == 2
    err = capsys.readouterr().err
    assert "--data-dir DIR or set SHEAF_FMTL_DATA=DIR" in err and "$SHEAF_FMTL_DATA (not set)" in err


def test_a_problem_without_data_is_named_beside_those_that_run(
    no_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = Recorder(monkeypatch)
    empty = no_env / "empty"
    empty.mkdir()
    assert _reproduce("frontier", "--datasets", "school,synthetic-clusters", "--data-dir", str(empty)) == 0
    assert {p for p, _ in runs.points} == {"synthetic-clusters"}
    err = capsys.readouterr().err
    assert "frontier / school: data not present" in err and f"searched {empty}" in err
    assert "school: data not present" in (no_env / "out" / "frontier.md").read_text()


@pytest.mark.parametrize("name", ["frontier", "curves", "all"])
@pytest.mark.parametrize("seeds", ["0", "-3", "100000000"])
def test_seeds_below_one_or_absurd_are_refused_before_any_run(
    no_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, seeds: str
) -> None:
    runs = Recorder(monkeypatch)
    data = _data_folder(no_env / "data")
    assert _reproduce(name, "--seeds", seeds, "--data-dir", str(data)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"sheaf-fmtl: error: --seeds {seeds}: give a number of seeds from 1 to 1000 (seeds 0 .. N-1), "
        "e.g. --seeds 3"
    )
    assert not runs.cells and not runs.points and not (no_env / "out").exists()


def test_a_valid_seed_count_reaches_the_planners(no_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Recorder(monkeypatch)
    data = _data_folder(no_env / "data")
    assert _reproduce("frontier", "--datasets", "school", "--seeds", "2", "--data-dir", str(data)) == 0
    assert runs.points and {s for _, s in runs.points} == {(0, 1)}
    assert _reproduce("curves", "--datasets", "school", "--seeds", "2", "--data-dir", str(data), out="r") == 0
    assert {c.seed for c in runs.cells["curves"]} == {0, 1}


def test_the_library_refuses_the_same_counts() -> None:
    for bad in (0, -3, 10**8, True, 2.5):
        with pytest.raises(ValueError, match="give a number of seeds from 1 to 1000"):
            rep.seed_count(bad, 5)  # type: ignore[arg-type]
    assert rep.seed_count(None, 5) == 5 and rep.seed_count(1000, 5) == 1000
