"""Helpers the tests of several folders share: a folder's contents to compare before and after a
command, the one line a refused or stopped command wrote, and a round step that signals the run."""

from __future__ import annotations

import csv
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: How every refusal of the command line starts.
ERROR = "sheaf-fmtl: error: "


def folder_snapshot(
    root: Path, *, folders: bool = True, links: bool = False, but: str = ""
) -> dict[str, bytes | str | None]:
    """Every path under ``root`` (relative to it) with its content, to compare before and after:
    a file its bytes; a folder ``None`` (left out with ``folders=False``, and so is anything that
    is no file); with ``links=True`` a link ``-> target`` (not followed, else it reads as what it
    names). Files named ``but`` are left out."""
    out: dict[str, bytes | str | None] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if links and p.is_symlink():
            out[key] = f"-> {os.readlink(p)}"
        elif p.is_file():
            if p.name != but:
                out[key] = p.read_bytes()
        elif folders:
            out[key] = None
    return out


def one_line(err: str, fragment: str = "", *, start: str = "") -> str:
    """The line of ``err`` (what a command wrote to stderr), which must be its only one, start with
    ``start`` and hold ``fragment``; the test fails, showing ``err``, otherwise."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start) and fragment in lines[0], err
    return lines[0]


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line, ``sheaf-fmtl: error: ...``, a refused command wrote to stderr (what it wrote
    is read from ``capsys``)."""
    return one_line(capsys.readouterr().err, start=ERROR)


def signalling(
    step: Callable[..., Any], at: int, sig: int = signal.SIGTERM, times: int = 1
) -> Callable[..., None]:
    """``step`` (``Simulation.step``, or one simulation's bound ``step``) that, after its ``at``-th
    call, sends ``sig`` to this process ``times`` times: the run stops after that round."""
    count = [0]

    def step_then_signal(*args: Any) -> None:
        step(*args)
        count[0] += 1
        if count[0] == at:
            for _ in range(times):
                os.kill(os.getpid(), sig)

    return step_then_signal


#: ``summary.json`` fields that differ between two runs of the same numbers (time, memory, resumption).
VOLATILE = {"wall_seconds", "peak_rss_bytes", "cuda_max_allocated_bytes", "resumed_from_round"}


def run_summary(path: Path) -> dict[str, Any]:
    """A run folder's ``summary.json`` without its :data:`VOLATILE` fields."""
    s = json.loads((path / "summary.json").read_text())
    return {k: v for k, v in s.items() if k not in VOLATILE}


def metric_rows(path: Path) -> list[dict[str, str]]:
    """A run folder's ``metrics.csv`` rows without their wall time."""
    with open(path / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k != "wall_seconds"} for r in csv.DictReader(f)]


def checkpoint_thetas(path: Path) -> Any:  # noqa: ANN401 - the checkpoint's list of tensors
    """The models a run folder's ``checkpoint.pt`` holds."""
    import torch

    return torch.load(path / "checkpoint.pt", weights_only=True)["thetas"]


class StopAt:
    """A callback that stops the run after round ``at`` (resumable, ``status: stopped``)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_round_end(self, round: int, metrics: Any, view: Any) -> Any:  # noqa: ANN401
        from sheaf_fmtl.callbacks import Stop

        return Stop(f"round {round}") if round == self.at else None
