"""A dataset's options (``data.KEY=VALUE``) checked against their declared kinds: what every reader
and generator shares (:func:`check_options`). It imports nothing of the readers, so that the size
estimates (:mod:`.sizes`), the generators (:mod:`.synthetic`) and the file readers (:mod:`.files`)
all stand on it without a circle."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from ..spelling import setting
from .base import DatasetError


def _integer(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


#: Option kinds: what the error message says, and the test.
OPTION_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "int": ("an integer", _integer),
    "number": ("a number", _number),
    "str": ("a string", lambda v: isinstance(v, str)),
    "ints": ("a list of integers", lambda v: isinstance(v, list) and all(_integer(x) for x in v)),
    "int or ints": (
        "an integer or a list of integers",
        lambda v: _integer(v) or (isinstance(v, list) and all(_integer(x) for x in v)),
    ),
    "any": ("anything", lambda v: True),
}


def _kind_of(default: Any) -> str:
    """The kind a default declares (``bool``, ``int``, ``number``, ``str``, ``ints``; ``any``)."""
    if isinstance(default, bool):
        return "bool"
    if _integer(default):
        return "int"
    if _number(default):
        return "number"
    if isinstance(default, str):
        return "str"
    if isinstance(default, list | tuple):
        return "ints"
    return "any"


def check_options(
    name: str, given: Mapping[str, Any], defaults: Mapping[str, Any], kinds: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``defaults`` updated by ``given``, each given value checked against its declared kind.

    Args:
        name: the dataset (named in errors).
        given: the request's options (``data.KEY=VALUE``).
        defaults: every allowed option and its default; the default's type is the option's kind
            (bool, integer, number, string, list of integers).
        kinds: kinds that differ from the default's type, from :data:`OPTION_KINDS`; a trailing
            ``?`` allows ``None`` too (e.g. ``{"task": "str?"}``).
    Returns:
        The options to use.
    Raises:
        DatasetError: an unknown option, or a value of the wrong kind (naming the option and the kind).
    """
    unknown = sorted(set(given) - set(defaults), key=str)
    if unknown:
        raise DatasetError(_unknown_option(name, unknown[0], given[unknown[0]], defaults))
    kinds = kinds or {}
    for key, value in given.items():
        kind = kinds.get(key) or _kind_of(defaults[key])
        optional = kind.endswith("?")
        words, ok = OPTION_KINDS[kind.rstrip("?")]
        if not (ok(value) or (optional and value is None)):
            raise DatasetError(
                f"{name}: data.{key} must be {words}{' or null' if optional else ''}, got {value!r:.80}; "
                + (
                    f"or leave data.{key} out for its default"
                    if defaults[key] is None
                    else f"e.g. {setting('data.' + key, defaults[key])} (its default)"
                )
            )
    return {**defaults, **given}


def _unknown_option(name: str, key: object, value: Any, defaults: Mapping[str, Any]) -> str:  # noqa: ANN401
    """The refusal of dataset option ``key`` (given ``value``) that ``name`` does not take: the
    closest of its options, given that value, in the user's spelling; else all of them."""
    text = f"{name}: unknown dataset option data.{str(key)[:80]}"
    close = difflib.get_close_matches(str(key).lower(), sorted(defaults), n=2, cutoff=0.6)
    if close:
        text += f"; did you mean {' or '.join(setting('data.' + k, value) for k in close)}?"
    return text + f" ({name}'s options: {', '.join(sorted(defaults)) or 'none'})"
