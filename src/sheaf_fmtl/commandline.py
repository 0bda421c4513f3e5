"""Options shared by every ``sheaf-fmtl`` subcommand: one spelling for config keys
(``--set KEY=VALUE [KEY=VALUE ...]``, the common ones also as flags), one parser class whose
usage errors are one line, and one error prefix (``sheaf-fmtl: error: ...``).

It sits outside the ``cli`` package: the commands that live with their own packages
(``bench/cli.py``, ``experiments/cli.py``) import it without importing the package that imports
them."""

from __future__ import annotations

import argparse
from typing import Any

PROG = "sheaf-fmtl"

#: Config keys that are also flags: (flag, config key, type, help).
COMMON_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--data-dir", "data_dir", str, "where datasets are searched first (config key data_dir)"),
    ("--clients", "clients", int, "number of clients (config key clients; default: the dataset's)"),
    ("--seed", "seed", int, "seed of everything (config key seed)"),
    ("--device", "device", str, "cpu, cuda or cuda:N (config key device)"),
)


class UsageError(Exception):
    """A command line argparse cannot read (printed as one line, exit status 2)."""


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors raise :class:`UsageError` instead of printing the usage."""

    def error(self, message: str) -> Any:  # noqa: ANN401 - never returns
        raise UsageError(f"{message} (see {self.prog} --help)")


#: The longest error line printed (a message that echoes a huge value is cut).
MAX_ERROR_CHARS = 2000


def error_line(message: object) -> str:
    """The one line every command prints on stderr for an error (at most :data:`MAX_ERROR_CHARS`)."""
    text = " ".join(str(message)[: 4 * MAX_ERROR_CHARS].split())
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 30] + f" ... ({len(str(message))} characters)"
    return f"{PROG}: error: {text}"


def add_config_options(
    parser: argparse.ArgumentParser,
    *,
    config_file: bool = True,
    sets: bool = True,
    flags: tuple[str, ...] = ("data_dir", "clients", "seed", "device"),
    out: str | None = "output folder",
    quiet: bool = True,
    overwrite: bool = True,
) -> None:
    """Add the config options to ``parser``.

    Args:
        parser: a subcommand's parser.
        config_file: take an optional positional YAML config file.
        sets: take ``--set KEY=VALUE [KEY=VALUE ...]`` (repeatable).
        flags: which of :data:`COMMON_FLAGS` (by config key) to add.
        out: help of ``--out`` (``None``: no ``--out``).
        quiet: add ``--quiet`` (no progress output).
        overwrite: add ``--overwrite`` (clear a non-empty ``--out`` first).
    """
    if config_file:
        parser.add_argument("config", nargs="?", help="YAML config file (keys: sheaf-fmtl run --help-keys)")
    if sets:
        parser.add_argument(
            "--set",
            nargs="+",
            action="extend",
            default=[],
            metavar="KEY=VALUE",
            help="config keys, e.g. --set rounds=50 lam=0.1 data.relatedness=0.5 (values read as YAML)",
        )
    for flag, key, kind, text in COMMON_FLAGS:
        if key in flags:
            parser.add_argument(flag, dest=key, type=kind, default=None, help=text)
    if out is not None:
        parser.add_argument("--out", help=out)
    if quiet:
        parser.add_argument(
            "--quiet",
            action="store_true",
            help="no progress output (a bar on a terminal, else a line every tenth of the rounds)",
        )
    if overwrite:
        parser.add_argument(
            "--overwrite",
            action="store_true",
            help="clear a non-empty --out folder first (it is refused otherwise)",
        )


def config_keys(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys given as flags (typed; applied after ``--set``)."""
    return {key: getattr(args, key) for _, key, _, _ in COMMON_FLAGS if getattr(args, key, None) is not None}
