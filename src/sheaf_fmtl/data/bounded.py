"""Reading a small file whose size is bounded before it is read: a config, ``summary.json``,
``preprocessing.json``, ``metrics.csv``, a checkpoint's manifest, a run folder's marker and ledger,
a client's CSV file (``dataset=file:FOLDER``). A received run folder is data: any of these may be a
link to ``/dev/zero`` or a FIFO, or a file of gigabytes. Only a regular file is read (opened without
blocking, then checked), and only when it is at most ``limit`` bytes: at most ``limit + 1`` bytes
are ever read, also from a file that grows."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MiB = 1 << 20
#: Bounds of the files sheaf-fmtl reads whole (a config holds at most 100000 values; a summary,
#: a manifest, a marker and a ledger are a few kilobytes; ``preprocessing.json`` holds two numbers a
#: feature a client; ``metrics.csv`` a row an evaluation; a client's CSV file is :data:`LARGE`).
SMALL, LARGE = 16 * MiB, 1024 * MiB


class UnboundedFile(ValueError):
    """A file that is not a regular file, or is larger than its bound (one line naming it)."""


def read_bounded(path: str | Path, limit: int = SMALL, *, stream: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (:class:`UnboundedFile`
    otherwise; OSError as ``open`` raises it, e.g. FileNotFoundError). ``stream``: a pipe or device
    is read too (a config given as ``<(...)``), at most ``limit + 1`` bytes of it."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (a FIFO would block a plain open)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        regular = stat.S_ISREG(info.st_mode)
        if not regular and not (stream and (stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode))):
            raise UnboundedFile(f"{p} is not a regular file (a device, FIFO or socket); not read")
        if regular and info.st_size > limit:
            raise UnboundedFile(
                f"{p} holds {info.st_size} bytes, more than the {limit} it may hold; not read"
            )
        if not regular:
            os.set_blocking(fd, True)  # (a pipe's writer may not have written yet)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnboundedFile(f"{p} holds more than the {limit} bytes it may hold; not read")
    return data


def read_text_bounded(path: str | Path, limit: int = SMALL, *, stream: bool = False) -> str:
    """:func:`read_bounded` decoded as UTF-8 (UnicodeDecodeError as ``bytes.decode`` raises it)."""
    return read_bounded(path, limit, stream=stream).decode("utf-8")
