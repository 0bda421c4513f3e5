"""Where a default Sheaf-FMTL run's memory goes: live bytes against resident memory, phase by phase.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/live_memory.py [--clients 10000] [--rounds 6]

The ``bench scale`` synthetic problem (20-80 samples a client, mean degree 8) under the program's heap
policy (``SHEAF_FMTL_HEAP``). A thread samples every millisecond the resident memory
(``/proc/self/statm``) and the bytes glibc's allocator has handed out and not had back
(``mallinfo2``: ``uordblks + hblkhd``); per phase (data, build, the round-0 evaluation, each round,
the last evaluation) it prints both at the phase's start and their peaks within it, above the
interpreter's. The gap between the two peaks is freed memory the heap keeps. glibc on Linux only;
``mallinfo2`` walks the heap, so beyond about 30,000 clients the sampling slows the run.
"""

from __future__ import annotations

import argparse
import ctypes
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class _Info(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = _Info


def resident() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def live() -> int:
    info = _libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


class Sampler(threading.Thread):
    """The peaks of :func:`resident` and :func:`live` since the last :meth:`reset`."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks = [0, 0]
        self.running = True
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.peaks = [resident(), live()]

    def run(self) -> None:
        while self.running:
            with self.lock:
                self.peaks = [max(self.peaks[0], resident()), max(self.peaks[1], live())]
            time.sleep(0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()

    from sheaf_fmtl.heap import heap_policy, keep_freed_pages, run_under_tunables

    run_under_tunables()  # as the program starts
    keep_freed_pages()
    from sheaf_fmtl import algorithms  # noqa: F401 - the interpreter's part of the baseline
    from sheaf_fmtl.bench.scale_worker import SYNTHETIC_DATA
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.runtime.engine.simulate import build_simulation, load_dataset

    base = (resident(), live())
    sampler = Sampler()
    sampler.start()
    print(f"{args.clients:,} synthetic clients, heap policy {heap_policy()}; MB above the interpreter")
    print(f"{'phase':<8} {'resident':>9} {'peak':>7} {'live':>7} {'peak':>7}")

    def phase(name: str, work: Callable[[], Any]) -> Any:
        start = (resident(), live())
        sampler.reset()
        out = work()
        with sampler.lock:
            r, lv = sampler.peaks[0], max(sampler.peaks[1], live())
        print(
            f"{name:<8} {(start[0] - base[0]) / 1e6:>9.0f} {(r - base[0]) / 1e6:>7.0f} "
            f"{(start[1] - base[1]) / 1e6:>7.0f} {(lv - base[1]) / 1e6:>7.0f}",
            flush=True,
        )
        return out

    config = RunConfig(dataset="synthetic", clients=args.clients, graph_degree=8, data=SYNTHETIC_DATA)
    dataset = phase("data", lambda: load_dataset(config))
    sim = phase("build", lambda: build_simulation(config.replace(rounds=args.rounds), dataset=dataset))
    phase("eval 0", sim.evaluate)
    for k in range(args.rounds):
        phase(f"round {k}", sim.step)
    phase("eval", sim.evaluate)
    sampler.running = False


if __name__ == "__main__":
    main()
