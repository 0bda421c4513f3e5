"""What the bench measures besides a benchmark's own timings: the copy bandwidth (the floor's
denominator), ``sim.step()`` times, and the current resident set size (the peak is
:func:`sheaf_fmtl.metrics.memory.peak_rss_bytes`)."""

from __future__ import annotations

import os
from typing import Any

import torch

from .. import progress
from ..metrics.memory import peak_rss_bytes
from ..runtime.engine.simulate import Simulation
from .timing import sync, timed


def copy_bandwidth(nbytes: int, device: str = "cpu", repeats: int = 5) -> float:
    """``2 * nbytes / t`` (read + write) of the fastest of ``repeats`` copies of a float32 tensor.

    Args:
        nbytes: size of the copied tensor (far beyond the caches: the floor is a memory pass).
        device: where the tensor lives.
        repeats: copies timed; the fastest counts.
    Returns:
        Bytes moved per second.
    """
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch
    best = min(timed(lambda: dst.copy_(src), device) for _ in range(repeats))
    return 2 * nbytes / best


def time_steps(sim: Simulation[Any], warmup: int, rounds: int, device: str, desc: str) -> list[float]:
    """Seconds of each of ``rounds`` calls of ``sim.step()`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        sim.step()
    sync(device)
    return [
        timed(sim.step, device)
        for _ in progress.bar(range(rounds), desc=desc, unit="round", transient=True, enabled=rounds >= 2)
    ]


def rss_bytes() -> int:
    """Current resident set size (Linux ``/proc``; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()
