"""How the program exits: a rank leaves with ``os._exit`` after its exit handlers and with its output
flushed (the interpreter's own exit could abort it in the communication library's thread destructors);
any other process exits as usual."""

from __future__ import annotations

import os
import subprocess
import sys

PROGRAM = """
import atexit, sys
import torch.distributed  # a rank has it loaded
atexit.register(lambda: print("exit handler ran", flush=True))
sys.argv = ["sheaf-fmtl", "--version"]
from sheaf_fmtl.cli import entry
print("buffered line", end="")  # not flushed by the print itself
entry()
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_rank_runs_its_exit_handlers_and_flushes_its_output() -> None:
    result = _run(dict(os.environ, RANK="0", WORLD_SIZE="1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("buffered line")
    assert "sheaf-fmtl" in result.stdout  # the version line
    assert result.stdout.rstrip().endswith("exit handler ran")


def test_a_process_that_is_no_rank_exits_as_usual() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = _run(env)
    assert result.returncode == 0, result.stderr
    assert "exit handler ran" in result.stdout
