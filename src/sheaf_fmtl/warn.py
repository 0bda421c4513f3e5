"""Warnings that point at the user's line: the first frame outside this package, whatever depth
of the library issued them (``warnings.warn``'s ``skip_file_prefixes`` needs Python 3.12)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parent)


def user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by this function's caller that names the first
    frame outside the package."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop
        level += 1
    return level


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
