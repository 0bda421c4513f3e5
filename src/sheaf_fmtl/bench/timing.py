"""Wall-clock timing that waits for the device (shared by the harness and the roofline)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> float:
    """Seconds of one call of ``fn``, with queued device work finished before and after."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0
