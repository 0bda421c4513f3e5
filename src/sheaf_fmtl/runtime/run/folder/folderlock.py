"""The marker of a run folder (:data:`MARKER`, written first) and the ``fcntl.flock`` lock the
process writing the folder holds on it while it runs; processes it starts (``processes = K``)
inherit the lock's file descriptor (:data:`HELD_ENV`, :data:`HELD_FD_ENV`). Which folders may be
written, and taking one: :mod:`.rundir`."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ....spelling import option

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks, markers only
    fcntl = None  # type: ignore[assignment]


MARKER = ".sheaf-fmtl-run"


#: Set by a process that holds a folder's lock for the processes it starts (``processes = K``),
#: with the number of the lock's file descriptor they inherit; a started process counts as holding
#: the folder only when that descriptor is the folder's marker and holds its lock, so the
#: environment alone never lifts a lock.
HELD_ENV = "SHEAF_FMTL_HELD_FOLDER"


HELD_FD_ENV = "SHEAF_FMTL_HELD_FD"


_HELD: dict[str, int] = {}  # resolved folder -> file descriptor of its locked marker
_OWNER: dict[str, int] = {}  # resolved folder -> the thread that took its lock
_WRITING: set[str] = set()  # resolved folders a round loop of this process writes now
_GUARD = threading.Lock()


class FolderError(ValueError):
    """A folder the library may not write or clear (one line naming it)."""


def another_out() -> str:
    """How a refusal names the way out, in the user's spelling: ``choose another --out`` on the
    command line, ``choose another out=...`` in Python (:mod:`sheaf_fmtl.spelling`)."""
    return f"choose another {option('out')}"


def overwrite_option() -> str:
    """``--overwrite`` on the command line, ``overwrite=True`` in Python."""
    return option("overwrite", True)


def is_marked(path: str | Path) -> bool:
    """``path`` is a folder (not a link) holding the library's marker (a regular file)."""
    p = Path(path)
    return p.is_dir() and not p.is_symlink() and (p / MARKER).is_file() and not (p / MARKER).is_symlink()


def _key(p: Path) -> str:
    return str(p.resolve())


def _held(p: Path) -> bool:
    """This thread holds ``p``'s lock (or this process was started with it): another thread of the
    same process does not, so two threads never both write one folder."""
    key = _key(p)
    if key in _HELD:
        return _OWNER.get(key) == threading.get_ident()
    return os.environ.get(HELD_ENV) == key and _inherited_lock(p)


def take(p: Path, fd: int) -> None:
    """Record that this thread holds ``p``'s lock through ``fd`` (:func:`_lock`)."""
    _HELD[_key(p)], _OWNER[_key(p)] = fd, threading.get_ident()


def release(p: Path) -> None:
    _HELD.pop(_key(p), None)
    _OWNER.pop(_key(p), None)


def held_elsewhere(p: Path) -> bool:
    """Another thread of this process holds ``p``'s lock."""
    key = _key(p)
    return key in _HELD and _OWNER.get(key) != threading.get_ident()


@contextlib.contextmanager
def writing(path: str | Path | None) -> Iterator[None]:
    """Around one round loop that writes the run folder ``path``: a second one of this process into
    the same folder (a callback that starts a run into its own run's folder, another thread) is
    refused in one line before it touches anything (FolderError)."""
    if path is None:
        yield
        return
    key = _key(Path(path))
    with _GUARD:
        if key in _WRITING:
            raise FolderError(
                f"{path} is being written by another run of this process (a callback's run, or another "
                f"thread); two runs never write one folder: {another_out()} for this run "
                "(nothing was changed)"
            )
        _WRITING.add(key)
    try:
        yield
    finally:
        with _GUARD:
            _WRITING.discard(key)


def _inherited_lock(p: Path) -> bool:
    """The descriptor :data:`HELD_FD_ENV` names is ``p``'s marker and this process holds its lock
    through it (inherited from the process that took it)."""
    try:
        fd = int(os.environ.get(HELD_FD_ENV, ""))
        mine, marker = os.fstat(fd), os.stat(p / MARKER, follow_symlinks=False)
    except (ValueError, OSError):
        return False
    if (mine.st_dev, mine.st_ino) != (marker.st_dev, marker.st_ino):
        return False
    if fcntl is None:
        return True
    try:  # succeeds on the description that holds the lock; fails while another process holds it
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def held_lock(path: str | Path) -> int | None:
    """The file descriptor of the lock this process holds on ``path`` (``None``: none). A process
    started with it (``pass_fds``) shares the lock, which lasts until every holder has ended."""
    return _HELD.get(_key(Path(path)))


def is_locked(path: str | Path) -> bool:
    """Another process (or another claim of this one) holds the lock of the marked folder ``path``."""
    p = Path(path)
    if fcntl is None or not is_marked(p) or _held(p):
        return False
    try:
        fd = os.open(p / MARKER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (closing releases a lock taken just now)
    return False


def _write_marker(p: Path, kind: str) -> bool:
    """Create ``p/MARKER`` unless it exists; whether this call created it."""
    body = json.dumps({"written_by": "sheaf-fmtl", "kind": kind, "created": time.time()})
    try:
        fd = os.open(p / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(body + "\n")
    return True


def set_kind(p: Path, kind: str) -> None:
    """Rewrite the marker of ``p`` (held by this process) to say ``kind`` wrote it: in place, so the
    lock on it stays (``--overwrite`` makes a sweep's folder a run's, and so on)."""
    body = json.dumps({"written_by": "sheaf-fmtl", "kind": kind, "created": time.time()})
    fd = os.open(p / MARKER, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "w") as f:
        f.write(body + "\n")


def _lock(p: Path) -> int:
    fd = os.open(p / MARKER, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FolderError(
                f"{p} is in use by another sheaf-fmtl process that is still running; wait for it to end "
                f"or {another_out()}"
            ) from None
        raise
    return fd
