"""The marker of a run folder (:data:`MARKER`, written first) and the ``fcntl.flock`` lock the
process writing the folder holds on it while it runs; processes it starts (``processes = K``)
inherit the lock's file descriptor (:data:`HELD_ENV`, :data:`HELD_FD_ENV`). Which folders may be
written, and taking one: :mod:`.rundir`."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

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


class FolderError(ValueError):
    """A folder the library may not write or clear (one line naming it)."""


def is_marked(path: str | Path) -> bool:
    """``path`` is a folder (not a link) holding the library's marker (a regular file)."""
    p = Path(path)
    return p.is_dir() and not p.is_symlink() and (p / MARKER).is_file() and not (p / MARKER).is_symlink()


def _key(p: Path) -> str:
    return str(p.resolve())


def _held(p: Path) -> bool:
    return _key(p) in _HELD or (os.environ.get(HELD_ENV) == _key(p) and _inherited_lock(p))


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
                "or choose another --out"
            ) from None
        raise
    return fd
