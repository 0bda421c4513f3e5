"""Whether a tracker's server answers, asked once with a short timeout before a run hands the
server to MLflow or W&B (whose own retries wait minutes on a server that is down, printing
nothing), :class:`Refused`, a logger's refusal of a destination before the run starts, and
:class:`TrackerError`, the one line a logger ends a run with when its server stops
answering during it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping

from ..checkpoints.checkpoint import rank_and_world

#: How long the probe waits to connect, and then for the answer (seconds).
PROBE_SECONDS = 5.0

#: How a logger's one line ends when its server fails during the run, and at its end.
STOPPED = "the run stopped there, its folder keeping what it wrote (--resume continues it)"
FINISHED = "the run itself finished, its folder complete"

#: The cause inside a ``requests`` / ``urllib3`` error's text: an OS error's, or an HTTP status's.
_CAUSE = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)|ResponseError\('([^']+)'")


class Refused(ValueError):
    """A logger's refusal, before the run starts, of the value of one of its arguments (or of an
    environment variable that stands for one, ``$MLFLOW_TRACKING_URI``): ``reason`` says why and
    what to do."""

    def __init__(self, logger: str, argument: str, value: str, reason: str) -> None:
        self.logger, self.argument, self.value, self.reason = logger, argument, value, reason
        super().__init__(f"{logger}: {argument} = {value!r}: {reason}")


class TrackerError(RuntimeError):
    """A logger's server failed during the run: the run stops after the round it was logging,
    its folder keeping the rows and the last checkpoint (``--resume`` continues it)."""


def unanswered(url: str, timeout: float | None = None) -> str | None:
    """Why nothing answers an HTTP request to ``url`` within ``timeout`` seconds to connect and as
    many for the answer (``connection refused``, ``no answer within 5 s``, ...); ``None`` when
    something answers (any HTTP status: a server that wants a login answers too); ``timeout``
    defaults to :data:`PROBE_SECONDS`. Asked on rank 0 only (the rank that logs). Proxies are
    those of the environment, as the trackers use them."""
    if rank_and_world()[0] != 0:
        return None
    timeout = PROBE_SECONDS if timeout is None else timeout
    import requests

    try:
        requests.get(url, timeout=(timeout, timeout), allow_redirects=False)
    except requests.exceptions.Timeout:
        return f"no answer within {timeout:g} s"
    except requests.exceptions.RequestException as e:
        return cause(e)
    return None


@contextlib.contextmanager
def environment(defaults: Mapping[str, str]) -> Iterator[None]:
    """Within this block the environment variables ``defaults`` names hold these values, unless
    the environment sets them already (the user's choice is kept); restored after."""
    added = [name for name in defaults if name not in os.environ]
    os.environ.update({name: defaults[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def first_line(error: BaseException) -> str:
    """An error's first line (its type's name when it has no text), at most 300 characters."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def cause(error: BaseException) -> str:
    """What failed in a connection's error (``connection refused``, ``too many 503 error
    responses``), found in its text; else its first line."""
    found = _CAUSE.search(str(error))
    if found is None:
        return first_line(error)
    return (found.group(1) or found.group(2)).strip().lower()
