"""The configuration reference, made from the schema (:mod:`.schema`) alone: every key's type,
default, allowed values and doc, as a Markdown table (the documentation's page) or as text
(``sheaf-fmtl run --help-keys``)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from ..component_keys import declared, owner_of
from .schema import RunConfig, key_fields
from .values import choices, range_of

_TYPE_WORDS = {"int": "integer", "float": "number", "bool": "true/false", "str": "string"}


@dataclass(frozen=True)
class KeyDoc:
    """One key of the reference."""

    name: str
    type: str
    default: str
    allowed: str  # choices (comma list) or a range, or ""
    doc: str
    choices: bool = False
    component: str = ""  # whose key it is ("": the common record)


def _type(annotation: str) -> str:
    parts = [p.strip() for p in annotation.split("|")]
    words = ["mapping" if p.startswith("dict") else _TYPE_WORDS.get(p, p) for p in parts if p != "None"]
    return " or ".join(words + (["null"] if "None" in parts else []))


def _default(f: Any) -> str:  # noqa: ANN401 - a dataclass Field of any type
    value = f.default_factory() if f.default is MISSING else f.default
    return json.dumps(value)


def _allowed(name: str) -> str:
    allowed = choices(name)
    if allowed is not None:
        return ", ".join(allowed)
    bounds = range_of(name)
    if bounds is not None:
        return bounds[4]
    return "cpu, cuda, cuda:N" if name == "device" else ""


def key_docs(config_type: type = RunConfig) -> list[KeyDoc]:
    """Every key of ``config_type``, in the schema's order (a run's: the common keys, then each
    component's, as :func:`~sheaf_fmtl.component_keys.declare_keys` registered them).

    Raises:
        ValueError: a key has no doc (``metadata["doc"]`` of its field), naming it.
    """
    found: list[Field[Any]] = (
        list(key_fields().values())
        if config_type is RunConfig
        else [f for f in fields(config_type) if not f.metadata.get("internal")]
    )
    out = []
    for f in found:
        doc = str(f.metadata.get("doc", "")).strip()
        if not doc:
            raise ValueError(f"config key '{f.name}' has no doc: give its field one (config/keys*.py, _key)")
        listed = choices(f.name) is not None or f.name == "device"
        owner = owner_of(f.name) if config_type is RunConfig else None
        whose = declared(owner).component if owner is not None else ""
        out.append(KeyDoc(f.name, _type(str(f.type)), _default(f), _allowed(f.name), doc, listed, whose))
    return out


def markdown(config_type: type = RunConfig) -> str:
    """The reference as a Markdown table (key, type, default, allowed, meaning)."""
    rows = [
        "| key | component | type | default | allowed | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k in key_docs(config_type):
        cells = [f"`{k.name}`", k.component or "common", k.type, f"`{k.default}`", k.allowed, k.doc]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def text(config_type: type = RunConfig, width: int = 100) -> str:
    """The reference as plain text, one paragraph per key."""
    blocks = []
    heading = None
    for k in key_docs(config_type):
        if k.component != heading:
            heading = k.component
            blocks.append(f"[{heading or 'common keys'}]")
        allowed = f"one of {k.allowed}" if k.choices else k.allowed
        facts = "; ".join(x for x in (k.type, f"default {k.default}", allowed) if x)
        doc = textwrap.fill(k.doc.replace("`", ""), width, initial_indent="    ", subsequent_indent="    ")
        blocks.append(f"{k.name} ({facts})\n{doc}")
    return "\n".join(blocks) + "\n"
