"""Run folders are owned: a folder the library writes carries a marker file (:data:`MARKER`, written
first), and the process writing it holds an ``fcntl.flock`` lock on that marker while it runs.

- A new or empty folder may be written; a non-empty one only when it carries the marker and
  ``overwrite`` (or a resume) is asked, and never while another live process holds its lock.
- Clearing (``overwrite``) removes only what the library writes (:data:`OWNED`) in marked folders,
  never follows a symbolic link; anything else in the folder stays. Files are replaced, never
  written through (:func:`sheaf_fmtl.config.files.replace_file`): a link named like a file the
  library writes (``config.yaml``, ``checkpoint.pt``, ``checkpoints``, ...) is removed (the link,
  not what it points to) before a run writes there, and ``--resume`` refuses a ``checkpoints`` link.
- Processes a run starts (``processes = K``) inherit the lock's file descriptor, so the lock lasts
  while any of them lives, even when the process that took it was killed.
- The owning process takes the folder with :func:`claim` (before the run is built: a failed start
  that created the folder removes it again); the run clears it (:func:`prepare_out_dir`) only once
  its config is validated and its data and model are built.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from .ledger import LEDGER, entry_names, owned_names, record_owned

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
#: What the library writes into a run folder (a run, a cell, plots, ``run --seeds``, the demo).
OWNED = re.compile(
    r"config\.yaml|metrics\.csv|summary\.json|checkpoint\.pt|preprocessing\.json|cell\.json|aggregate\.(json|md)"
    r"|demo\.(json|png|pdf|svg)|(metric_vs_rounds_and_bits|map_norms_.*|edge_weights_.*)\.(png|pdf|svg)"
    r"|\.(config\.yaml|metrics\.csv|summary\.json|checkpoint\.pt|preprocessing\.json)\.tmp.*"
    r"|\.?best\.pt(\.tmp)?"  # the best evaluation's models (early stopping), and their temporary file
)
CHECKPOINTS = "checkpoints"
_HELD: dict[str, int] = {}  # resolved folder -> file descriptor of its locked marker


class FolderError(ValueError):
    """A folder the library may not write or clear (one line naming it)."""


def is_marked(path: str | Path) -> bool:
    """``path`` is a folder (not a link) holding the library's marker (a regular file)."""
    p = Path(path)
    return p.is_dir() and not p.is_symlink() and (p / MARKER).is_file() and not (p / MARKER).is_symlink()


def _entries(p: Path) -> list[Path]:
    return [c for c in p.iterdir() if c.name not in (MARKER, LEDGER)] if p.is_dir() else []


def record_written(folder: Path, before: set[str]) -> None:
    """Record in the ledger what appeared in the run folder ``folder`` since ``before`` (a run's
    callbacks' files, a TensorBoard folder inside it), beyond what :data:`OWNED` names already."""
    new = {n for n in entry_names(folder) - before if not OWNED.fullmatch(n) and n != CHECKPOINTS}
    record_owned(folder, {n for n in new if not (folder / n).is_symlink()})


def check_replaceable(folder: str | Path, names: Iterable[str], flag: str = "--out") -> None:
    """FolderError when ``folder`` holds an entry named in ``names`` that sheaf-fmtl did not write
    (not in its ledger, nor a run folder's own file): a command never replaces a file of yours."""
    p = Path(folder)
    ours = owned_names(p)
    for name in names:
        path = p / name
        if not (path.exists() or path.is_symlink()) or name in ours:
            continue
        if is_marked(p) and OWNED.fullmatch(name):
            continue
        raise FolderError(
            f"{path} exists and was not written by sheaf-fmtl; it is never replaced: choose another "
            f"{flag} or move the file (nothing was changed)"
        )


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


def check_path(path: str | Path) -> Path:
    """``path`` can be a folder: it is not a file, nor under one (FolderError otherwise)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise FolderError(f"output folder {p} is an existing file; choose another --out")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise FolderError(f"output folder {p} is under {parent}, which is a file; choose another --out")
    return p


def check_out_dir(
    path: str | Path,
    overwrite: bool = False,
    *,
    resume: bool = False,
    reuse: bool = False,
    group_member: bool = False,
    kind: str | None = None,
) -> Path:
    """``path`` as a run folder, checked without touching anything.

    Args:
        path: the folder a run will write (it may not exist yet).
        overwrite: a non-empty folder is accepted if it carries the marker (and is cleared by
            :func:`prepare_out_dir`).
        resume: the folder must carry the marker (a run continues in it).
        reuse: a non-empty folder is accepted if it carries the marker (a command that continues
            what it wrote there: ``run --seeds``, ``sweep``, ``reproduce``).
        group_member: a rank other than 0 of a process group: rank 0 holds the folder's lock for
            the group, so the lock is not held against it.
        kind: with ``reuse``, what the command writes (``seeds``, ``sweep``, ...): a marked folder
            another kind of command wrote is refused.
    Returns:
        ``path`` as a :class:`Path`.
    Raises:
        FolderError: ``path`` (or a folder above it) is a file; it is a symbolic link and would be
            cleared or resumed; it is non-empty and not marked (or ``overwrite`` is false); it is
            another kind's (``reuse``); a live process holds its lock.
    """
    p = check_path(path)
    if p.is_symlink() and (overwrite or resume):
        raise FolderError(
            f"{p} is a symbolic link; sheaf-fmtl clears or resumes only the folder itself, never through "
            "a link: give the folder it points to"
        )
    marked = is_marked(p)
    if resume:
        _check_resumable(p, marked)
    if _entries(p) and not resume and not (reuse and marked):
        _check_clearable(p, overwrite, marked)
    if marked and not group_member and is_locked(p):
        raise FolderError(
            f"{p} is in use by another sheaf-fmtl process that is still running; wait for it to end "
            "or choose another --out"
        )
    if reuse and marked and kind is not None:
        _check_kind(p, kind)
    return p


def marker_kind(path: str | Path) -> str | None:
    """What wrote the marked folder ``path`` (``run``, ``seeds``, ``sweep``, ``reproduce``, ...):
    its marker's ``kind``; ``None`` for a marker without one (made by hand)."""
    try:
        body = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    kind = body.get("kind") if isinstance(body, dict) else None
    return kind if isinstance(kind, str) else None


def _check_kind(p: Path, kind: str) -> None:
    """A command that continues what it wrote (``reuse``) continues only a folder of its own kind."""
    found = marker_kind(p)
    if found is not None and found != kind:
        raise FolderError(
            f"output folder {p} holds a sheaf-fmtl {found} folder, not a {kind} one; a {kind} continues "
            "only what a command of its kind wrote: choose another --out (nothing was changed)"
        )


def _check_resumable(p: Path, marked: bool) -> None:
    """``--resume p``: the folder exists, carries the marker, and its checkpoints are no link."""
    if not p.exists():
        raise FolderError(f"--resume {p}: no such run folder")
    if marked and (p / CHECKPOINTS).is_symlink():
        raise FolderError(
            f"--resume {p}: {p / CHECKPOINTS} is a symbolic link; sheaf-fmtl writes only inside the run "
            "folder, never through a link (nothing was changed)"
        )
    if not marked:
        raise FolderError(
            f"{p} is not a run folder written by sheaf-fmtl (no {MARKER} file in it); nothing was changed "
            f"(a run folder of a version before markers: create an empty {MARKER} in it to resume it)"
        )


def _check_clearable(p: Path, overwrite: bool, marked: bool) -> None:
    """A non-empty folder a new run would write: only one sheaf-fmtl marked, with ``overwrite``."""
    if not marked:
        how = (
            "--overwrite clears only folders sheaf-fmtl wrote; a run folder of a version before "
            f"markers: create an empty {MARKER} in it to overwrite it"
            if overwrite
            else "--overwrite"
        )
        raise FolderError(
            f"output folder {p} is not empty and was not written by sheaf-fmtl (no {MARKER} file in "
            f"it); choose another --out (nothing was changed; {how})"
        )
    if not overwrite:
        raise FolderError(
            f"output folder {p} is not empty (an earlier run?); choose another --out, or pass "
            "--overwrite (Python: overwrite=True) to clear it first"
        )


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


def mark(path: str | Path, kind: str = "run") -> Path:
    """Create the folder ``path`` (checked: :func:`check_out_dir`, any content) with its marker."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    _write_marker(p, kind)
    return p


@contextlib.contextmanager
def claim(
    path: str | Path,
    *,
    overwrite: bool = False,
    resume: bool = False,
    reuse: bool = False,
    kind: str = "run",
) -> Iterator[Path]:
    """Own the folder ``path`` while the block runs: check it (:func:`check_out_dir`), create it
    with its marker, and hold the marker's lock (released at the end). When the block fails and
    this call created the folder, the folder (then empty) is removed again.

    Raises:
        FolderError: see :func:`check_out_dir`; or another process took the folder meanwhile.
    """
    p = check_out_dir(path, overwrite, resume=resume, reuse=reuse, kind=kind if reuse else None)
    new = [q for q in [p, *p.parents] if not q.exists()]  # created here: removed again on failure
    if _held(p):  # this process (or the one that started it) owns it already
        yield p
        return
    p.mkdir(parents=True, exist_ok=True)
    created = _write_marker(p, kind)
    fd = _lock(p)
    _HELD[_key(p)] = fd
    ok = False
    try:
        if not created and not (overwrite or resume or reuse) and _entries(p):
            raise FolderError(
                f"output folder {p} is not empty (another run started into it); choose another --out"
            )
        yield p
        ok = True
    finally:
        _HELD.pop(_key(p), None)
        os.close(fd)
        if not ok and new and not _entries(p):
            (p / MARKER).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # (stops at the first folder not empty)
                for q in new:
                    q.rmdir()


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


def clear(path: Path, depth: int = 8) -> bool:
    """Remove what the library wrote under the marked folder ``path``: :data:`OWNED` files and
    ``checkpoints/`` in marked folders, marked subfolders emptied that way; never through or of a
    symbolic link. Whether anything was removed."""
    owned, removed = is_marked(path), False
    ledger = owned_names(path) if owned else set()
    for child in path.iterdir():
        if child.name == MARKER or child.is_symlink():
            continue
        if child.is_dir():
            if owned and (child.name == CHECKPOINTS or child.name in ledger):
                shutil.rmtree(child)  # (rmtree removes links inside, never their targets)
                removed = True
            elif depth > 0 and clear(child, depth - 1) and not _entries(child):
                (child / MARKER).unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    child.rmdir()
                removed = True
        elif owned and (OWNED.fullmatch(child.name) or child.name in ledger):
            child.unlink()
            removed = True
    if ledger:
        (path / LEDGER).unlink(missing_ok=True)  # (what it named is gone)
    return removed


def prepare_out_dir(path: str | Path, overwrite: bool = False, kind: str = "run") -> Path:
    """Check ``path`` (:func:`check_out_dir`), clear what the library wrote there when
    ``overwrite``, and create it with its marker."""
    p = check_out_dir(path, overwrite)
    if p.is_dir() and overwrite and is_marked(p):
        clear(p)
    if p.is_dir():
        drop_links(p)
    return mark(p, kind)


def drop_links(path: Path) -> list[str]:
    """Remove the symbolic links in ``path`` named like what the library writes (:data:`OWNED`,
    ``checkpoints``): the links, never what they point to, so nothing is written through one.
    The names removed."""
    gone = []
    for child in path.iterdir():
        if child.is_symlink() and (child.name == CHECKPOINTS or OWNED.fullmatch(child.name)):
            child.unlink()
            gone.append(child.name)
    return gone
