"""Stop a run cleanly on SIGINT / SIGTERM: the handlers only record the signal, the round loop
checks it after each round, and the previous handlers come back when the run ends."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Across processes (runtime/run/launching/launch.py): the group's answer to "stop now?" given this rank's, so
# that every rank stops after the same round (it adopts the signal of the rank that got one).
# None: this process alone decides.
AGREE: Callable[[bool], bool] | None = None
_ACTIVE: list[StopRequest] = []


def signalled() -> int:
    """The signal pending in an active :class:`StopRequest` of this process (0: none)."""
    return max((s.signum or 0 for s in _ACTIVE), default=0)


def adopt(signum: int) -> None:
    """Record ``signum`` (received by another rank) in the active requests that have none."""
    for s in _ACTIVE:
        if s.signum is None:
            s.signum = signum


class SecondSignal(KeyboardInterrupt):
    """A second SIGINT / SIGTERM while the first is being honoured: stop now."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopRequest:
    """Context manager: while active, SIGINT and SIGTERM set :attr:`signum` instead of stopping
    the process (only in the main thread, where Python delivers signals; elsewhere it does nothing).
    A second signal while the first is pending raises :class:`SecondSignal` at once.

    Requests nest (a command running several runs holds one around them all): a new request
    starts with the signal an enclosing one has pending, and hands its own signal to the enclosing
    ones when it ends, so the command stops after the run that saw it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        self.signum = signalled() or None
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        _ACTIVE.append(self)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise SecondSignal(signum)
        self.signum = signum

    @property
    def requested(self) -> bool:
        local = self.signum is not None
        return AGREE(local) if AGREE is not None else local

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.signum is not None:
            adopt(self.signum)


@contextlib.contextmanager
def leave_summary(folder: str | Path | None) -> Iterator[None]:
    """Around a run into ``folder``: when a second signal ends it before its ``summary.json`` is
    written, write one (``status = interrupted``, what ``config.yaml`` and ``metrics.csv`` hold), so
    the folder still says what it is; the :class:`SecondSignal` goes on."""
    try:
        yield
    except SecondSignal as e:
        if folder is not None and Path(folder).is_dir() and not (Path(folder) / "summary.json").exists():
            write_stopped_summary(Path(folder), e.signum)
        raise


def write_stopped_summary(folder: Path, signum: int) -> None:
    """A ``summary.json`` for a run ended by a second signal, from the files it left."""
    from ....config import read_config_file
    from ....config.files import replace_file
    from ....metrics.results import read_metrics

    summary: dict[str, Any] = {"status": "interrupted", "signal": signal.Signals(signum).name, "final": None}
    with contextlib.suppress(Exception):  # what can be read of what the run left
        config = read_config_file(folder / "config.yaml")
        summary.update({k: config.get(k) for k in ("algorithm", "dataset", "rounds", "seed")})
    with contextlib.suppress(Exception):
        rounds = read_metrics(folder)["round"]
        summary["rounds_done"] = int(rounds[-1]) if rounds else 0
    summary["message"] = "stopped by a second signal before the run recorded its summary"
    replace_file(folder / "summary.json", json.dumps(summary, indent=2) + "\n")


def stopped_status(signum: int | None, what: str, out: str | Path) -> int:
    """A command of several runs that a signal stopped: one line on stderr and 128 + the signal
    (0 when ``signum`` is ``None``)."""
    if not signum:
        return 0
    name = signal.Signals(signum).name
    print(
        f"sheaf-fmtl: {what} stopped by {name}; what finished is recorded in {out}/; run the same "
        "command again to continue",
        file=sys.stderr,
    )
    return 128 + int(signum)
