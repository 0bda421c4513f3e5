"""Stop a run cleanly on SIGINT / SIGTERM: the handlers only record the signal, the round loop
checks it after each round, and the previous handlers come back when the run ends."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Across processes (runtime/launch.py): the group's answer to "stop now?" given this rank's, so
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


class StopRequest:
    """Context manager: while active, SIGINT and SIGTERM set :attr:`signum` instead of stopping
    the process (only in the main thread, where Python delivers signals; elsewhere it does nothing).
    A second signal while the first is pending raises :class:`KeyboardInterrupt` at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        _ACTIVE.append(self)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
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
