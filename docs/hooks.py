"""MkDocs hooks: the reference pages made from the code, so they cannot drift from it, and the
site's MathJax served by the site itself.

``docs/reference/config.md`` gets the table of every config key from the schema
(:mod:`sheaf_fmtl.config.reference`); ``docs/reference/cli.md`` gets the help of every command from
the parsers the ``sheaf-fmtl`` command uses; Sphinx roles in docstrings (``:func:`run```) render as
the code they name. Before a build, MathJax (its ``tex-mml-chtml``
component and fonts) is copied into ``docs/javascripts/mathjax/`` from the npm package (``npm
pack``, checked against its SHA-256) unless it is there already: a page of the built site loads
nothing from another host."""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

MATHJAX = "mathjax@3.2.2"
MATHJAX_SHA256 = "1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09"
VENDOR = Path(__file__).parent / "javascripts" / "mathjax"
#: What the site needs of the package (under ``package/es5/``): the component and its fonts.
MATHJAX_FILES = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2/")


#: A Sphinx role in a docstring as Markdown renders it (``:func:`run``` -> ``:func:<code>run</code>``).
ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def on_page_content(html: str, **_: Any) -> str:
    """Docstrings' Sphinx roles as the code they name (``~a.b.c``: ``c``), not as literal text."""
    return ROLE.sub(
        lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html
    )


def on_pre_build(config: Any, **_: Any) -> None:
    vendor_mathjax()


def vendor_mathjax(dest: Path = VENDOR) -> Path:
    """``dest/tex-mml-chtml.js`` (and its fonts), fetched with ``npm pack`` when missing."""
    from mkdocs.exceptions import PluginError  # here: the tests import this module without mkdocs

    script = dest / "tex-mml-chtml.js"
    if script.is_file():
        return script
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run(
                ["npm", "pack", MATHJAX, "--silent", "--pack-destination", tmp],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (OSError, subprocess.SubprocessError) as e:
            raise PluginError(
                f"MathJax for the site: `npm pack {MATHJAX}` failed ({type(e).__name__}); install npm, or "
                f"put the package's es5/{MATHJAX_FILES[0]} and es5/{MATHJAX_FILES[1]} under {dest}"
            ) from None
        tgz = next(Path(tmp).glob("mathjax-*.tgz"))
        if hashlib.sha256(tgz.read_bytes()).hexdigest() != MATHJAX_SHA256:
            raise PluginError(
                f"MathJax for the site: {tgz.name} differs from the SHA-256 pinned in docs/hooks.py"
            )
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix("package/es5/")
                if member.isfile() and any(name == f or name.startswith(f) for f in MATHJAX_FILES):
                    target = dest / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    assert source is not None
                    target.write_bytes(source.read())
                elif member.name == "package/LICENSE":
                    dest.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    assert source is not None
                    (dest / "LICENSE").write_bytes(source.read())
    return script


CONFIG_KEYS = "<!-- generated: config keys -->"
COMMANDS = "<!-- generated: commands -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    if CONFIG_KEYS in markdown:
        import sheaf_fmtl.algorithms  # noqa: F401 - registers the choices of 'algorithm' and 'maps'
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
