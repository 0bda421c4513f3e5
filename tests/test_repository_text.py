"""The repository's text speaks of the project only: no tracker issue numbers and no notes kept
outside the repository, in the package, the tests, the docs, the benchmarks and the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "tests", "docs", "benchmarks", "examples", "configs")
FILES = ("README.md", "pyproject.toml", "Makefile")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}
# Built so that this file does not hold them itself.
OUTSIDE = re.compile(r"\b" + "iss" + r"ues? #?\d+|\b(" + "STY" + "LE|" + "DES" + r"IGN)\.md\b", re.I)


def _texts() -> list[Path]:
    paths = [ROOT / f for f in FILES if (ROOT / f).is_file()]
    for folder in FOLDERS:
        paths += [
            p
            for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file() and p.suffix in SUFFIXES and "javascripts" not in p.parts
        ]
    return paths


def test_no_issue_numbers_or_outside_notes_are_named() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for p in _texts()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, "name the idea, not the tracker or an outside note:\n" + "\n".join(found)


def test_the_check_finds_them() -> None:
    assert OUTSIDE.search("fixed in " + "iss" + "ue 12") and OUTSIDE.search("see " + "STY" + "LE.md")
    assert OUTSIDE.search("(" + "Iss" + "ue #3)") and OUTSIDE.search("see " + "des" + "ign.md")
    assert not OUTSIDE.search("an issue with 2 clients")
    assert not OUTSIDE.search("this issues about 35 ops")
