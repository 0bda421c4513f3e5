"""``benchmarks/suite_time.py``, which writes the README's test line: it reads pytest's summary,
writes its line between the README's marks only, and the README holds those marks with a line of
that form."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = runpy.run_path(str(ROOT / "benchmarks" / "suite_time.py"), run_name="suite_time")
#: The line's form (what ``sentence`` writes starts so).
LINE = re.compile(r"^\d+ tests pass and \d+ skip in (\d+ min )?\d+ s")


@pytest.mark.parametrize(
    "tail, want",
    [
        ("974 passed, 49 skipped, 3 warnings in 135.20s (0:02:15)", {"passed": 974, "skipped": 49}),
        ("12 passed in 3.01s", {"passed": 12}),
        ("===== 5 passed, 1 deselected in 0.50s =====", {"passed": 5, "deselected": 1}),
    ],
)
def test_the_summary_line_is_read(tail: str, want: dict[str, int]) -> None:
    found = SCRIPT["counts"](f"....\n[100%]\n{tail}\n")
    assert {k: found[k] for k in want} == want


def test_no_summary_is_an_error() -> None:
    with pytest.raises(ValueError, match="no pytest summary"):
        SCRIPT["counts"]("1 failed? no: collection error\n")


def test_the_line_goes_between_the_marks_only() -> None:
    start, end = SCRIPT["START"], SCRIPT["END"]
    text = f"before {start}old line{end} after\n"
    where = "2 CPUs (x), Linux"
    line = SCRIPT["sentence"]({"passed": 3, "skipped": 1}, 135.2, 300.0, where, "abc1234", False)
    assert LINE.match(line) and "2 min 15 s (5 min 0 s of CPU time)" in line and "abc1234" in line
    assert SCRIPT["update"](text, line) == f"before {start}{line}{end} after\n"
    with pytest.raises(ValueError, match="marks"):
        SCRIPT["update"]("no marks here", line)


def test_the_readme_holds_the_marks_and_a_line_of_that_form() -> None:
    readme = (ROOT / "README.md").read_text()
    start, end = SCRIPT["START"], SCRIPT["END"]
    assert readme.count(start) == readme.count(end) == 1
    assert LINE.match(readme.split(start)[1].split(end)[0])


def test_the_suite_is_timed_with_the_workers_make_test_starts() -> None:
    makefile = (ROOT / "Makefile").read_text()
    options = SCRIPT["worker_options"](makefile)
    assert options[0] == "-n"
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "$(TEST_WORKERS)" in recipe  # make test runs what the script times
    with pytest.raises(ValueError, match="TEST_WORKERS"):
        SCRIPT["worker_options"]("test:\n\tpytest\n")


@pytest.mark.parametrize(
    "options, cpus, want",
    [
        (["-n", "logical", "--maxprocesses", "4"], 2, 2),
        (["-n", "logical", "--maxprocesses", "4"], 16, 4),
        (["-n", "auto"], 3, 3),
        (["-n", "5", "--maxprocesses", "2"], 16, 5),  # (pytest-xdist caps auto and logical only)
        ([], 8, 0),
    ],
)
def test_workers_are_counted_as_pytest_xdist_starts_them(options: list[str], cpus: int, want: int) -> None:
    assert SCRIPT["workers"](options, cpus) == want


def test_the_line_names_its_workers() -> None:
    line = SCRIPT["sentence"]({"passed": 3}, 61.0, 100.0, "2 CPUs (x), Linux", "abc1234", True, 2)
    assert LINE.match(line) and "in 1 min 1 s in 2 workers (1 min 40 s of CPU time)" in line
