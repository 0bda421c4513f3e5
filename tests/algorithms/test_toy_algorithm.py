"""A new algorithm is its module plus its test: one file (``toy_algorithm.py``) registers an
algorithm with its own key, and the command line runs it, in a process of its own (so this test
session's registry stays as the package fills it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = "algorithm=tests.algorithms.toy_algorithm:ToyShrink"
FAST = [
    "--set",
    "rounds=4",
    "--set",
    "eval_every=2",
    "--set",
    "clients=6",
    "--set",
    "local_epochs=0",
    "--quiet",
]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "sheaf_fmtl", "run", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.slow  # (several processes of its own: make test-slow, CI's second step)
def test_a_toy_algorithm_from_one_file_runs_from_the_command_line(tmp_path: Path) -> None:
    toy, local, shrunk = tmp_path / "toy", tmp_path / "local", tmp_path / "shrunk"
    assert _run(*FAST, "--set", TOY, "--out", str(toy)).returncode == 0
    assert _run(*FAST, "--set", "algorithm=local", "--out", str(local)).returncode == 0
    done = _run(*FAST, "--set", TOY, "--set", "toy_shrink=0.5", "--out", str(shrunk))
    assert done.returncode == 0, done.stderr
    final = {p.name: json.loads((p / "summary.json").read_text())["final"] for p in (toy, local, shrunk)}
    assert final["toy"] == final["local"]  # toy_shrink = 0: local training, to the bit
    assert final["shrunk"] != final["local"]  # its own key reaches it
    assert "toy_shrink: 0.5" in (shrunk / "config.yaml").read_text()


def test_the_toy_key_is_checked_where_it_is_declared(tmp_path: Path) -> None:
    refused = _run(*FAST, "--set", TOY, "--set", "toy_shrink=2", "--out", str(tmp_path / "bad"))
    assert refused.returncode == 2
    assert "toy_shrink" in refused.stderr and "out of range" in refused.stderr
    assert not (tmp_path / "bad").exists()
