"""A disk that fills up during a run: the run ends in one line naming its folder and what it kept
(``metrics.csv`` to its last whole row, the last complete checkpoint to resume from); every file of
the folder is written whole or not at all (a temporary file renamed onto it; ``metrics.csv``, which
grows a row at a time, is cut back to its last whole row)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from .integrity import CheckpointError, find_checkpoint

#: What a full disk (or a spent quota) raises.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # (EFBIG: a file size limit, ulimit -f)


def disk_full(folder: Path | None, rows: list[dict[str, Any]], error: OSError) -> OSError:
    """The one-line error of a run in ``folder`` whose write failed with ``error`` when the disk is
    full; ``error`` itself otherwise (or without a folder)."""
    if folder is None or error.errno not in DISK_FULL:
        return error
    limit = error.errno == errno.EFBIG
    kept = [f"metrics.csv to round {rows[-1]['round']}" if rows else "no evaluated round"]
    try:
        checkpoint = find_checkpoint(folder)[0]
    except CheckpointError:
        checkpoint = None
    if checkpoint is not None:
        kept.append(f"the checkpoint of round {int(checkpoint.name.split('-')[1])}")
    room = "raise the file size limit (ulimit -f)" if limit else "free space"
    how = f"{room}, then sheaf-fmtl run --resume {folder}" if checkpoint else f"{room}, run it again"
    what = "a file reached this process's file size limit" if limit else "the disk is full"
    return OSError(  # (no errno: its "[Errno 28]" would open the line)
        f"{folder}: {what} ({error.strerror or error}); the run stopped and kept "
        f"{' and '.join(kept)}, every file whole: {how}",
    )
