"""Run folders: refuse a path that cannot be one, or that holds files of another run (unless
asked to overwrite, which clears it first), so that one folder never mixes two runs."""

from __future__ import annotations

import shutil
from pathlib import Path


def check_out_dir(path: str | Path, overwrite: bool = False) -> Path:
    """``path`` as a run folder, checked without touching anything.

    Args:
        path: the folder a run will write (it may not exist yet).
        overwrite: a non-empty folder is accepted (and cleared by :func:`prepare_out_dir`).
    Returns:
        ``path`` as a :class:`Path`.
    Raises:
        ValueError: ``path`` (or a folder above it) is a file, or ``path`` is a non-empty folder
            and ``overwrite`` is false.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"output folder {p} is an existing file; choose another --out")
    for parent in p.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"output folder {p} is under {parent}, which is a file; choose another --out")
    if p.is_dir() and any(p.iterdir()) and not overwrite:
        raise ValueError(
            f"output folder {p} is not empty (an earlier run?); choose another --out, or pass "
            "--overwrite (Python: overwrite=True) to clear it first"
        )
    return p


def prepare_out_dir(path: str | Path, overwrite: bool = False) -> Path:
    """Check ``path`` (:func:`check_out_dir`), clear it when ``overwrite`` and create it."""
    p = check_out_dir(path, overwrite)
    if p.is_dir() and overwrite:
        for child in p.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    p.mkdir(parents=True, exist_ok=True)
    return p
