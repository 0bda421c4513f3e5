"""Peak memory of one run: resident set size, and on CUDA the largest allocation of the caching
allocator, both measured from the start of the run (also when several runs share a process)."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

CLEAR_REFS = Path("/proc/self/clear_refs")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process: ``VmHWM`` on Linux (``ru_maxrss`` survives ``exec``
    and would report the parent's peak in a fresh child), else ``ru_maxrss`` (KiB on Linux, bytes
    on macOS)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)


def reset_peak_memory(device: str) -> bool:
    """Start the peaks afresh: the RSS high-water mark (Linux: ``5`` into ``/proc/self/clear_refs``,
    which ``getrusage`` then reports from) and CUDA's peak statistics.

    Returns:
        Whether the RSS peak could be reset (elsewhere it stays the process's peak).
    """
    if _on_cuda(device):
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_memory(device: str) -> dict[str, int | None]:
    """``peak_rss_bytes`` and ``cuda_max_allocated_bytes`` (``None`` off CUDA) since the last reset."""
    cuda = torch.cuda.max_memory_allocated(torch.device(device)) if _on_cuda(device) else None
    return {"peak_rss_bytes": peak_rss_bytes(), "cuda_max_allocated_bytes": cuda}


def _on_cuda(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.is_available()
