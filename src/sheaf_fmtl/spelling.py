"""How a refusal names a setting: in the spelling of the entry point the user came through.

A message names a config key and its fix once, with :func:`setting`, and reads in the user's own
words: on the command line ``--set validation=0.2`` (``--seed 3`` for a key the command also takes
as a flag; ``--set data.groups=2`` for a dataset's option), in Python ``validation=0.2``
(``data={'groups': 2}``), the keyword of ``sheaf_fmtl.run``, ``Federation.run`` and ``RunConfig``.
:func:`option` does the same for the arguments that are no config key (``--out`` / ``out=...``,
``--overwrite`` / ``overwrite=True``).

The command line's entry point marks the commands it runs (:func:`command_line`, with the flags
the command has); everything else is Python, the library's own spelling. The mark is a context
variable: a thread or an ``asyncio`` task started outside a command is Python again.

This module imports nothing from the package: every layer's refusals use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from typing import Any

#: A value the user chooses (``...`` in both spellings).
ANY: Any = ...

#: The flags of the command being run (config key -> flag), or ``None`` in Python.
_COMMAND: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "sheaf_fmtl_command_line", default=None
)

#: The longest value a setting echoes; a longer one is shown as ``...``.
MAX_VALUE_CHARS = 200


@contextlib.contextmanager
def command_line(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Within this block refusals are spelled for the command line; ``flags``: the config keys the
    command takes as flags (``{"seed": "--seed"}``), named so instead of ``--set KEY=VALUE``."""
    token = _COMMAND.set(dict(flags or {}))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def on_command_line() -> bool:
    """Whether the refusals being written are read on the command line."""
    return _COMMAND.get() is not None


def setting(key: str, value: Any = ANY) -> str:  # noqa: ANN401 - any config value
    """Config key ``key`` (``data.NAME`` for a dataset's option) given ``value`` (:data:`ANY`: a
    value of the user's choosing), as the user writes it: ``--set key=value`` or the command's flag
    on the command line, ``key=value`` in Python (``data={'NAME': value}`` for a dataset's option).

    Examples:
        >>> from sheaf_fmtl.spelling import command_line, setting
        >>> setting("validation", 0.2), setting("data.groups", 2), setting("graph", "complete")
        ('validation=0.2', "data={'groups': 2}", "graph='complete'")
        >>> with command_line({"seed": "--seed"}):
        ...     setting("validation", 0.2), setting("data.groups", 2), setting("seed", 3)
        ('--set validation=0.2', '--set data.groups=2', '--seed 3')
    """
    flags = _COMMAND.get()
    if flags is not None:
        text = _yaml(value)
        return f"{flags[key]} {text}" if key in flags else f"--set {key}={text}"
    text = _python(value)
    if key.startswith("data."):
        return f"data={{{key[5:]!r}: {text}}}"
    return f"{key}={text}"


def option(name: str, value: Any = ANY) -> str:  # noqa: ANN401 - any argument's value
    """An argument that is no config key (``out``, ``overwrite``, ``resume``, ``trust_plugins``),
    as the user writes it: ``--out FOLDER`` / ``--overwrite`` on the command line (:data:`ANY` and
    ``True`` name the flag alone), ``out='FOLDER'`` / ``overwrite=True`` in Python.

    Examples:
        >>> from sheaf_fmtl.spelling import command_line, option
        >>> option("out", "runs/a"), option("overwrite", True)
        ("out='runs/a'", 'overwrite=True')
        >>> with command_line():
        ...     option("out", "runs/a"), option("overwrite", True), option("out")
        ('--out runs/a', '--overwrite', '--out')
    """
    if on_command_line():
        flag = "--" + name.replace("_", "-")
        return flag if value is ANY or value is True else f"{flag} {_yaml(value)}"
    return f"{name}={_python(value)}"


def _too_long(value: Any) -> bool:  # noqa: ANN401 - any config value
    """A value too long to echo, told without forming its whole text (a huge list, a long string)."""
    try:
        return (
            len(value) > MAX_VALUE_CHARS if isinstance(value, str | bytes | list | tuple | Mapping) else False
        )
    except TypeError:
        return True


def _yaml(value: Any) -> str:  # noqa: ANN401 - any config value
    """``value`` as a ``--set`` value (read as YAML): ``true``, ``null``, ``[1, 2]``."""
    if value is ANY or _too_long(value):
        return "..."
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, list | tuple):
        text = "[" + ", ".join(_yaml(v) for v in value) + "]"
    elif isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    else:
        text = str(os.fspath(value) if isinstance(value, os.PathLike) else value)
    return text if len(text) <= MAX_VALUE_CHARS else "..."


def _python(value: Any) -> str:  # noqa: ANN401 - any config value
    if value is ANY or _too_long(value):
        return "..."
    text = repr(os.fspath(value) if isinstance(value, os.PathLike) else value)
    return text if len(text) <= MAX_VALUE_CHARS else "..."
