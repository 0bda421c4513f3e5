"""The error every refused config raises, and how a refused value is echoed in it."""

from __future__ import annotations

import reprlib
from typing import Any


class ConfigError(ValueError):
    """One line naming the key and the allowed values."""


#: How much of a value an error message echoes.
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters (built without ever
    forming the whole repr of a huge value)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 20
    r.maxlevel = 4
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
