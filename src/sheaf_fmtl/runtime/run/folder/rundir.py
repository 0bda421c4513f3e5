"""Run folders are owned: a folder the library writes carries a marker file (:data:`MARKER`, written
first), and the process writing it holds an ``fcntl.flock`` lock on that marker while it runs.

- A new or empty folder may be written; a non-empty one only when it carries the marker and
  ``overwrite`` (or a resume) is asked, and never while another live process holds its lock.
- Clearing (``overwrite``) removes only what the library writes (:data:`.clearing.OWNED`) in marked folders,
  never follows a symbolic link; anything else in the folder stays. Files are replaced, never
  written through (:func:`sheaf_fmtl.config.files.replace_file`): a link named like a file the
  library writes (``config.yaml``, ``checkpoint.pt``, ``checkpoints``, ...) is removed (the link,
  not what it points to) before a run writes there, and ``--resume`` refuses a ``checkpoints`` link.
- Processes a run starts (``processes = K``) inherit the lock's file descriptor, so the lock lasts
  while any of them lives, even when the process that took it was killed.
- The owning process takes the folder with :func:`claim` (before the run is built: a failed start
  that created the folder removes it again); the run clears it (:func:`.clearing.prepare_out_dir`) only once
  its config is validated and its data and model are built.

The marker and its lock: :mod:`.folderlock`; what the library writes there and clearing it:
:mod:`.clearing`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ....data.bounded import read_text_bounded
from ....spelling import option
from .folderlock import (
    MARKER,
    FolderError,
    _held,
    _lock,
    _write_marker,
    another_out,
    held_elsewhere,
    is_locked,
    is_marked,
    overwrite_option,
    release,
    take,
)
from .ledger import LEDGER

CHECKPOINTS = "checkpoints"


def _entries(p: Path) -> list[Path]:
    return [c for c in p.iterdir() if c.name not in (MARKER, LEDGER)] if p.is_dir() else []


def check_path(path: str | Path) -> Path:
    """``path`` can be a folder: it is not a file, nor under one (FolderError otherwise)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise FolderError(f"output folder {p} is an existing file; {another_out()}")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise FolderError(f"output folder {p} is under {parent}, which is a file; {another_out()}")
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
    if marked and not group_member and held_elsewhere(p):
        raise FolderError(
            f"{p} is being written by another thread of this process; two runs never write one folder: "
            f"wait for it to end or {another_out()}"
        )
    if marked and not group_member and is_locked(p):
        raise FolderError(
            f"{p} is in use by another sheaf-fmtl process that is still running; wait for it to end "
            f"or {another_out()}"
        )
    if reuse and marked and kind is not None:
        _check_kind(p, kind)
    return p


def marker_kind(path: str | Path) -> str | None:
    """What wrote the marked folder ``path`` (``run``, ``seeds``, ``sweep``, ``reproduce``, ...):
    its marker's ``kind``; ``None`` for a marker without one (made by hand)."""
    try:
        body = json.loads(read_text_bounded(Path(path) / MARKER))
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
            f"only what a command of its kind wrote: {another_out()} (nothing was changed)"
        )


def _check_resumable(p: Path, marked: bool) -> None:
    """``--resume p``: the folder exists, carries the marker, and its checkpoints are no link."""
    if not p.exists():
        raise FolderError(f"{option('resume', p)}: no such run folder")
    if marked and (p / CHECKPOINTS).is_symlink():
        raise FolderError(
            f"{option('resume', p)}: "
            f"{p / CHECKPOINTS} is a symbolic link; sheaf-fmtl writes only inside the run "
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
            f"{overwrite_option()} clears only folders sheaf-fmtl wrote; a run folder of a version before "
            f"markers: create an empty {MARKER} in it to overwrite it"
            if overwrite
            else overwrite_option()
        )
        raise FolderError(
            f"output folder {p} is not empty and was not written by sheaf-fmtl (no {MARKER} file in "
            f"it); {another_out()} (nothing was changed; {how})"
        )
    if not overwrite:
        raise FolderError(
            f"output folder {p} is not empty (an earlier run?); {another_out()}, or pass "
            f"{overwrite_option()} to clear it first"
        )


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
    take(p, fd)
    ok = False
    try:
        if not created and not (overwrite or resume or reuse) and _entries(p):
            raise FolderError(
                f"output folder {p} is not empty (another run started into it); {another_out()}"
            )
        yield p
        ok = True
    finally:
        release(p)
        os.close(fd)
        if not ok and new and not _entries(p):
            (p / MARKER).unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # (stops at the first folder not empty)
                for q in new:
                    q.rmdir()
