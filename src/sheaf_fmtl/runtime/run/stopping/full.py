"""A disk that fills up during a run, or the user's code failing in it: the run ends in one line
naming its folder and what it kept (``metrics.csv`` to its last whole row, the last complete
checkpoint to resume from); every file of the folder is written whole or not at all (a temporary
file renamed onto it; ``metrics.csv``, which grows a row at a time, is cut back to its last whole
row)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from ....spelling import on_command_line
from ..checkpoints.integrity import CheckpointError, find_checkpoint

#: What a full disk (or a spent quota) raises.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # (EFBIG: a file size limit, ulimit -f)


def disk_full(folder: Path | None, rows: list[dict[str, Any]], error: OSError) -> OSError:
    """The one-line error of a run in ``folder`` whose write failed with ``error`` when the disk is
    full; ``error`` itself otherwise (or without a folder)."""
    if folder is None or error.errno not in DISK_FULL:
        return error
    limit = error.errno == errno.EFBIG
    kept, resumable = kept_so_far(folder, rows)
    room = "raise the file size limit (ulimit -f)" if limit else "free space"
    how = f"{room}, then sheaf-fmtl run --resume {folder}" if resumable else f"{room}, run it again"
    what = "a file reached this process's file size limit" if limit else "the disk is full"
    return OSError(  # (no errno: its "[Errno 28]" would open the line)
        f"{folder}: {what} ({error.strerror or error}); the run stopped and kept {kept}, every file "
        f"whole: {how}",
    )


def kept_so_far(folder: Path, rows: list[dict[str, Any]]) -> tuple[str, bool]:
    """What a run that stopped with an error left in ``folder`` (``metrics.csv`` to its last row, its
    last complete checkpoint), in words, and whether it can be resumed from that checkpoint."""
    kept = [f"metrics.csv to round {rows[-1]['round']}" if rows else "no evaluated round"]
    try:
        checkpoint = find_checkpoint(folder)[0]
    except CheckpointError:
        checkpoint = None
    if checkpoint is not None:
        kept.append(f"the checkpoint of round {int(checkpoint.name.split('-')[1])}")
    return " and ".join(kept), checkpoint is not None


def user_code_failed(folder: Path | None, rows: list[dict[str, Any]], error: ValueError) -> ValueError:
    """The one-line error of a run in ``folder`` stopped by an error of the user's code (``error``,
    already one line naming the code): it says what the folder kept and how to go on; ``error``
    itself without a folder."""
    if folder is None:
        return error
    kept, resumable = kept_so_far(folder, rows)
    if not resumable:
        how = "run it again"
    elif on_command_line():  # (its config names the code: a resume imports it only when trusted)
        how = f"sheaf-fmtl run --resume {folder} --trust-plugins"
    else:
        how = f"sheaf_fmtl.run(resume={str(folder)!r}, trust_plugins=True)"
    return type(error)(
        f"{error}; the run in {folder} stopped and kept {kept}, every file whole: once fixed, {how}"
    )
