"""Progress that reads well wherever it goes: a live bar on a terminal; in a file, a pipe, a CI
log or a terminal too narrow for a bar (a zero-width one, as some containers report), one plain
line every tenth of the work (a bar redrawn with carriage returns would leave
thousands of characters of fragments there); nothing when disabled (``--quiet``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from tqdm import tqdm

#: Lines a run writes without a terminal, besides its last one.
LINES = 10
#: The narrowest terminal a bar is drawn on (columns); a narrower one gets lines.
MIN_COLUMNS = 20


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: standard error, where progress goes) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or a stand-in without isatty
        return False


def columns(stream: TextIO | None = None) -> int | None:
    """The width of the terminal ``stream`` is on (``None``: unknown)."""
    stream = sys.stderr if stream is None else stream
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no file descriptor, or not a terminal
        return None


def wide_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` is a terminal wide enough for a bar (an unknown width counts as wide)."""
    width = columns(stream)
    return on_terminal(stream) and (width is None or width >= MIN_COLUMNS)


class Lines:
    """A stand-in for a tqdm bar off a terminal: ``desc: unit n/total, key value, elapsed, time left``
    (at the pace so far, as tqdm's bar estimates it) every
    ``total / LINES`` steps and at the last one; the same calls as the bar (iteration,
    :meth:`update`, :meth:`set_postfix`, :meth:`close`, ``with``)."""

    def __init__(
        self,
        iterable: Iterable[Any] | None,
        desc: str,
        unit: str,
        total: int | None,
        initial: int,
        stream: TextIO | None,
    ) -> None:
        self.iterable, self.desc, self.unit, self.n, self.start = iterable, desc, unit, initial, initial
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = initial + len(iterable)  # type: ignore[arg-type]  # checked just above
        self.total, self.stream = total, stream
        self.every = max(1, -(-total // LINES)) if total else 1
        self.postfix: dict[str, Any] = {}
        self.t0 = time.perf_counter()

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable or ():
            yield item
            self.update()

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        before, self.n = self.n, self.n + n
        if self.n // self.every > before // self.every or self.n == self.total:
            self._line()

    def set_postfix(self, postfix: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.postfix = {**(postfix or {}), **kwargs}

    def close(self) -> None:
        pass

    def _line(self) -> None:
        of = f"/{self.total}" if self.total else ""
        facts = [f"{self.unit} {self.n}{of}", *(f"{k} {v}" for k, v in self.postfix.items())]
        elapsed = time.perf_counter() - self.t0
        facts.append(f"{elapsed:.0f} s")
        if self.total and self.start < self.n < self.total:  # the pace so far, over what is left
            facts.append(f"about {elapsed / (self.n - self.start) * (self.total - self.n):.0f} s left")
        print(f"{self.desc}: {', '.join(facts)}", file=self.stream or sys.stderr, flush=True)


class Silent(Lines):
    """Progress switched off: the same calls, no output."""

    def _line(self) -> None:
        pass


def bar(
    iterable: Iterable[Any] | None = None,
    *,
    desc: str,
    unit: str,
    total: int | None = None,
    initial: int = 0,
    enabled: bool = True,
    transient: bool = False,
    stream: TextIO | None = None,
) -> Any:  # noqa: ANN401 - a tqdm bar or a stand-in with its interface
    """Progress over ``iterable`` (or, without one, advanced by ``update``).

    Args:
        desc: what is progressing (first on the line); unit: what one step is ("round").
        total, initial: the steps in all and those already done (a resumed run).
        enabled: ``False`` (``--quiet``): no output at all.
        transient: a bar that disappears when done (an inner loop): nothing off a terminal.
        stream: where progress goes (default standard error).
    Returns:
        A tqdm bar on a terminal at least :data:`MIN_COLUMNS` wide, else :class:`Lines` (or
        :class:`Silent`).
    """
    if enabled and wide_terminal(stream):
        return tqdm(
            iterable,
            desc=desc,
            unit=unit,
            total=total,
            initial=initial,
            leave=not transient,
            dynamic_ncols=True,
            file=stream,
        )
    kind = Lines if enabled and not transient else Silent
    return kind(iterable, desc, unit, total, initial, stream)


def note(message: str) -> None:
    """Print ``message`` on standard error on its own line, above a live bar if there is one
    (warnings: the results on standard output stay clean)."""
    tqdm.write(message, file=sys.stderr)
