"""Stop a run cleanly on SIGINT / SIGTERM: the handlers only record the signal, the round loop
checks it after each round, and the previous handlers come back when the run ends."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
