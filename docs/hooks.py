"""MkDocs hooks: the reference pages made from the code, so they cannot drift from it.

``docs/reference/config.md`` gets the table of every config key from the schema
(:mod:`sheaf_fmtl.config.reference`); ``docs/reference/cli.md`` gets the help of every command from
the parsers the ``sheaf-fmtl`` command uses."""

from __future__ import annotations

import argparse
import os
from typing import Any

CONFIG_KEYS = "<!-- generated: config keys -->"
COMMANDS = "<!-- generated: commands -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    if CONFIG_KEYS in markdown:
        from sheaf_fmtl.config import reference

        markdown = markdown.replace(CONFIG_KEYS, reference.markdown())
    if COMMANDS in markdown:
        markdown = markdown.replace(COMMANDS, commands())
    return markdown


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every sub-command's parser under it, depth first, in help order."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                out += _parsers(sub)
    return out


def commands() -> str:
    """Each command's ``--help``, under a heading naming it."""
    from sheaf_fmtl.cli import build_parser

    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width: the same page everywhere
    try:
        sections = [
            f"## `{p.prog}`\n\n```text\n{p.format_help().rstrip()}\n```\n" for p in _parsers(build_parser())
        ]
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width
    return "\n".join(sections)
