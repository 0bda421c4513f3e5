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
