"""The error every refused config raises, and how a refused value is echoed in it."""

from __future__ import annotations

import reprlib
from typing import Any

from ..component_keys import ConfigError
from ..spelling import setting

__all__ = ["SHOWN_CHARS", "ConfigError", "fix", "shown"]


#: How much of a value an error message echoes.
SHOWN_CHARS = 200


def fix(name: str, default: Any) -> str:  # noqa: ANN401 - any config value
    """The end of a refusal of config key ``name``'s value: its ``default`` as the user would give
    it, or (a default of ``None``, which depends on the problem) that leaving the key out gives it."""
    if default is None or isinstance(default, dict):
        return f"; or leave {name} out for its default"
    return f"; e.g. {setting(name, default)} (its default)"


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters (built without ever
    forming the whole repr of a huge value)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 20
    r.maxlevel = 4
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
