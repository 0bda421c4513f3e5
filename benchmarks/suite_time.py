"""The test suite's line in the README, measured: run `make test`'s selection once, on its workers
(the Makefile's `TEST_WORKERS`), then write its counts, its wall and CPU time, the machine and the
commit between the README's `test-suite` marks.

    .venv/bin/python benchmarks/suite_time.py            # run the suite, then update README.md
    .venv/bin/python benchmarks/suite_time.py --dry-run  # run the suite, print the line only

A failing suite writes nothing (its numbers are not the suite's). The real datasets' tests run when
`SHEAF_FMTL_DATA` names their folder, and are skipped otherwise; the line says which.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- test-suite: benchmarks/suite_time.py -->", "<!-- /test-suite -->"
#: pytest's last line: ``974 passed, 49 skipped, 3 warnings in 135.20s (0:02:15)``.
SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")


def counts(output: str) -> dict[str, int]:
    """``{"passed": 974, "skipped": 49, ...}`` from pytest's output (its last summary line)."""
    for line in reversed(output.strip().splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            pairs = (part.split(" ", 1) for part in found.group(1).split(", "))
            return {word: int(n) for n, word in pairs}
    raise ValueError("no pytest summary line (N passed ... in S s) in the output")


def duration(seconds: float) -> str:
    """``2 min 15 s`` (``48 s`` under a minute)."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def cpu_count() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> str:
    """``2 CPUs (Intel(R) Xeon(R) ...), Linux``: what the times were measured on."""
    model = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    return f"{cpu_count()} CPUs ({model or 'unknown model'}), {platform.system()}"


def worker_options(makefile: str) -> list[str]:
    """The pytest options ``make test`` adds (the Makefile's ``TEST_WORKERS := ...`` line)."""
    for line in makefile.splitlines():
        name, sep, value = line.partition(":=")
        if sep and name.strip() == "TEST_WORKERS":
            return value.split()
    raise ValueError("the Makefile has no TEST_WORKERS := ... line")


def workers(options: list[str], cpus: int) -> int:
    """How many pytest-xdist workers ``options`` start on ``cpus`` CPUs (``-n auto|logical|N``,
    ``--maxprocesses``; without ``-n``: 0, the suite in one process)."""
    if "-n" not in options:
        return 0
    n = options[options.index("-n") + 1]
    count = cpus if n in ("auto", "logical") else int(n)
    if n in ("auto", "logical") and "--maxprocesses" in options:
        count = min(count, int(options[options.index("--maxprocesses") + 1]))
    return count


def sentence(
    found: dict[str, int], wall: float, cpu: float, where: str, commit: str, data: bool, n_workers: int = 0
) -> str:
    """The README's line."""
    skipped = found.get("skipped", 0)
    datasets = "the real datasets found" if data else "without the real datasets (their tests skip)"
    side = f" in {n_workers} workers" if n_workers else ""
    return (
        f"{found.get('passed', 0)} tests pass and {skipped} skip in {duration(wall)}{side} "
        f"({duration(cpu)} of CPU time) on {where}, {datasets}, at commit {commit}"
    )


def update(readme: str, line: str) -> str:
    """``readme`` with ``line`` between the marks (which must be there, once)."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md needs the marks {START} and {END} once each")
    head, rest = readme.split(START)
    return head + START + line + END + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the line, leave README.md alone")
    args = parser.parse_args(argv)
    options = worker_options((ROOT / "Makefile").read_text())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    if done.returncode != 0:
        for line in done.stdout.splitlines():  # pytest's short summary: which failed
            if line.startswith(("FAILED", "ERROR")):
                print(line, file=sys.stderr)
        print("the suite failed: README.md left as it is", file=sys.stderr)
        return 1
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    data = bool(os.environ.get("SHEAF_FMTL_DATA"))
    found, n_workers = counts(done.stdout), workers(options, cpu_count())
    line = sentence(found, wall, cpu, machine(), commit or "unknown", data, n_workers)
    print(line)
    if not args.dry_run:
        readme = ROOT / "README.md"
        readme.write_text(update(readme.read_text(), line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
