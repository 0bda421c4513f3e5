"""A folder's ledger, ``.sheaf-fmtl-owned`` beside its marker: the names of what sheaf-fmtl wrote
there beyond the files a run folder always holds (a ``log_tensorboard`` folder it created inside
the run folder, a sweep's ranking, a table or bench result), as a JSON list. Only what sheaf-fmtl
itself creates is recorded, at the moment it creates it: a file or folder of yours that appears in
a run folder (saved there while a run writes it, or written by a callback of yours) is never
named. ``--overwrite`` removes what it names (:func:`.clearing.clear`), and a command replaces a
file only if it names it (:func:`.clearing.check_replaceable`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ....config.files import replace_file
from ....data.bounded import read_text_bounded

LEDGER = ".sheaf-fmtl-owned"
_MARKER = ".sheaf-fmtl-run"  # (:data:`.folderlock.MARKER`)


def _plain(name: str) -> bool:
    """``name`` is one entry of a folder (no separator, not ``.``/``..``, not the bookkeeping)."""
    return name not in ("", ".", "..", _MARKER, LEDGER) and "/" not in name and "\\" not in name


def owned_names(folder: str | Path) -> set[str]:
    """The names :func:`record_owned` recorded in ``folder`` (an unreadable ledger: none)."""
    path = Path(folder) / LEDGER
    if path.is_symlink() or not path.is_file():
        return set()
    try:
        names = json.loads(read_text_bounded(path))
    except (OSError, ValueError):
        return set()
    return {n for n in names if isinstance(n, str) and _plain(n)} if isinstance(names, list) else set()


def record_owned(folder: str | Path, names: Iterable[str]) -> None:
    """Add ``names`` (entries of ``folder`` that sheaf-fmtl wrote) to its ledger, so that
    ``--overwrite`` removes them (:func:`.clearing.clear`) and a later command may replace them
    (:func:`.clearing.check_replaceable`)."""
    p = Path(folder)
    known = owned_names(p)
    new = {n for n in names if _plain(n)} - known
    if new:
        replace_file(p / LEDGER, json.dumps(sorted(known | new)) + "\n")
