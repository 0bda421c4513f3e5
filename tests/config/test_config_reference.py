"""The configuration reference is made from the schema: every key has a doc, and every key is in
``sheaf-fmtl run --help-keys`` and in the documentation's page (made by docs/hooks.py)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.config import reference
from sheaf_fmtl.config.schema import key_fields

ROOT = Path(__file__).resolve().parents[2]
KEYS = list(key_fields())


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_key_has_a_doc_type_and_default():
    docs = reference.key_docs()
    assert [k.name for k in docs] == KEYS
    for k in docs:
        assert k.doc and k.type and k.default, k
    by_name = {k.name: k for k in docs}
    assert by_name["gamma"].allowed == "0 < gamma <= 1" and by_name["gamma"].default == "0.3"
    assert by_name["clients"].type == "integer or null" and by_name["clients"].default == "null"
    assert "compact, literal" == by_name["message_mode"].allowed


def test_a_key_without_a_doc_fails_naming_it():
    @dataclass(frozen=True)
    class Config:
        documented: int = field(default=1, metadata={"doc": "A documented key."})
        forgotten: int = 2

    with pytest.raises(ValueError, match="config key 'forgotten' has no doc"):
        reference.key_docs(Config)


def test_help_keys_lists_every_key(capsys):
    assert main(["run", "--help-keys"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line and not line.startswith(" ")]
    heads = [line.split(" ", 1)[0] for line in lines if not line.startswith("[")]
    assert heads == KEYS
    assert "[algorithm partial]" in lines  # listed by component


def test_the_documentation_page_is_generated_with_every_key():
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    hooks = _hooks()
    assert hooks.CONFIG_KEYS in page
    made = hooks.on_page_markdown(page, page=None, config=None, files=None)
    rows = [line.split("|")[1].strip() for line in made.splitlines() if line.startswith("| `")]
    assert rows == [f"`{k}`" for k in KEYS]


def test_the_cli_page_is_generated_with_every_command():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    made = _hooks().on_page_markdown(page, page=None, config=None, files=None)
    for command in (
        "run",
        "demo",
        "plot",
        "evaluate",
        "data list",
        "data describe",
        "data fetch",
        "bench",
        "sweep",
    ):
        assert f"## `sheaf-fmtl {command}`" in made
    assert "--help-keys" in made and "\r" not in made
