"""What makes this process a rank of a process group, and what ends it with its launcher.

- :func:`rank_world`: ``RANK`` and ``WORLD_SIZE`` in the environment (torchrun's, or set by
  :func:`.spawn.spawn` for ``processes = K``); set without a rendezvous, they are named as taken
  for torchrun's.
- :func:`watch_launcher`: a rank gets SIGTERM when the process that started it ends (Linux's
  ``PR_SET_PDEATHSIG``; elsewhere a watchdog thread on the parent's pid), the clean stop of
  :mod:`..stopping.interrupt`: the ranks stop after the same round with a checkpoint.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

from ....config import ConfigError
from ...silonet.session import PEERS_ENV as SILO_PEERS  # set by spawn for transport = tls

STORE_FILE = "SHEAF_FMTL_STORE_FILE"  # set by spawn: the ranks meet through this file
LAUNCHER = "SHEAF_FMTL_LAUNCHER_PID"  # set by spawn: the ranks stop when this process ends
PR_SET_PDEATHSIG = 1  # prctl(2)


def rank_world() -> tuple[int, int] | None:
    """``(rank, world size)`` when this process was started as a rank, else ``None``; ConfigError
    when ``RANK`` / ``WORLD_SIZE`` are set but are not a rank's (no rendezvous address)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    taken = (
        f"RANK={os.environ['RANK'][:20]} and WORLD_SIZE={os.environ['WORLD_SIZE'][:20]} in the environment "
        "were taken for torchrun's (this process one rank of a group)"
    )
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        raise ConfigError(
            f"{taken}, but they are not whole numbers; unset them, or start with torchrun"
        ) from None
    if world <= 1:
        return None
    if (
        not os.environ.get(STORE_FILE)
        and not os.environ.get(SILO_PEERS)
        and not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"))
    ):
        raise ConfigError(
            f"{taken}, but MASTER_ADDR and MASTER_PORT are not set; unset RANK and WORLD_SIZE to run one "
            "process (processes = K starts K itself), or start the ranks with torchrun"
        )
    if not 0 <= rank < world:
        raise ConfigError(f"{taken}, but RANK is not below WORLD_SIZE; unset them, or start with torchrun")
    return rank, world


def watch_launcher() -> None:
    """In a rank: SIGTERM to this process when the process that started it ends (a launcher killed
    by SIGKILL, an out-of-memory killer or a closed session), the clean stop of
    :mod:`..stopping.interrupt`. The launcher is :func:`spawn`'s process (:data:`LAUNCHER`), or torchrun's
    agent (the parent of a rank it started); other ranks are left alone."""
    pid = int(os.environ.get(LAUNCHER, "0") or 0)
    if not pid and "TORCHELASTIC_RUN_ID" in os.environ:
        pid = os.getppid()
    if not pid:
        return
    if not _parent_death_signal(signal.SIGTERM):  # not Linux: poll the parent's pid
        threading.Thread(target=_watch, args=(pid,), name="sheaf-fmtl-launcher-watch", daemon=True).start()
    if os.getppid() != pid:  # it ended before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def _parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent ends; whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(pid: int, every_s: float = 0.5) -> None:
    while os.getppid() == pid:
        time.sleep(every_s)
    os.kill(os.getpid(), signal.SIGTERM)
