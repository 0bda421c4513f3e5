"""Keys a component declares beside its code: a small frozen dataclass of :func:`key` fields (each
with its default, its doc, and the values it allows), registered with :func:`declare_keys` by the
module of the algorithm, map mode, compressor, graph, partitioner, schedule, transport, optimizer or
logger that reads them. The run's common record (``sheaf_fmtl.config.RunConfig``) holds one
instance of each declared class and reads the keys by their own names, so ``--set
personal_layers=2`` and ``run(personal_layers=2)`` keep their spelling; ``--help-keys`` lists the
keys by component.

A class's ``selector`` says which common key's value decides whether a run reads its keys
(``compressor``, ``graph``, ...), and ``readers`` which values of it do; a key may narrow them
(:func:`key`'s ``readers``). Keys of an algorithm or a map mode name no selector: the registry
entry that lists the class (``keys=`` of ``@register`` / ``MapModeSpec``) is their reader.

This module imports nothing of the package (it sits on the lowest floor): the data, the graphs and
the compressors below the config declare here too.

>>> from dataclasses import dataclass
>>> @declare_keys("toy")
... @dataclass(frozen=True)
... class ToyKeys(Keys):
...     toy_depth: int = key(2, "Depth of the toy.", rule="toy_depth >= 1")
>>> declared(ToyKeys).component
'toy'
>>> ToyKeys().toy_depth
2
>>> forget(ToyKeys)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar


class ConfigError(ValueError):
    """One line naming the key and the allowed values (every refused config raises it; also
    ``sheaf_fmtl.config.ConfigError``)."""


def key(
    default: Any,  # noqa: ANN401 - a key of any type
    doc: str,
    *,
    choices: tuple[str, ...] | None = None,
    rule: str = "",
    readers: tuple[str, ...] | None = None,
) -> Any:  # noqa: ANN401 - a dataclass field of any key's type
    """A config key of a component: its default and its doc, the ``choices`` it allows or the range
    ``rule`` it keeps, in words that are also its bounds (``"0 < gamma <= 1"``, ``"rank >= 1"``, a
    note in brackets after them), and the selector's values that read it when they are fewer than
    its class's (``readers``).

    >>> key(0.3, "Edge-space size.", rule="0 < gamma <= 1").metadata["range"]
    (0.0, False, 1.0, True, '0 < gamma <= 1')
    """
    meta: dict[str, Any] = {"doc": doc}
    if choices is not None:
        meta["choices"] = tuple(choices)
    if rule:
        meta["range"] = (*bounds(rule), rule)
    if readers is not None:
        meta["readers"] = tuple(readers)
    return field(default=default, metadata=meta)


_NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
_BETWEEN = re.compile(rf"^({_NUMBER}) (<=?) \w+ (<=?) ({_NUMBER})(?: \(.*\))?$")
_ONE_SIDE = re.compile(rf"^\w+ ([<>]=?) ({_NUMBER})(?: \(.*\))?$")


def bounds(rule: str) -> tuple[float | None, bool, float | None, bool]:
    """``(lower, lower inclusive, upper, upper inclusive)`` of a range in words; ValueError for
    words that are no range."""
    between = _BETWEEN.match(rule)
    if between:
        lo, lo_op, hi_op, hi = between.groups()
        return float(lo), lo_op == "<=", float(hi), hi_op == "<="
    one = _ONE_SIDE.match(rule)
    if not one:
        raise ValueError(
            f"range {rule!r}: write it as 'A < key <= B' or 'key >= A' (a note in brackets after)"
        )
    op, number = one.groups()
    if op.startswith(">"):
        return float(number), op == ">=", None, False
    return None, False, float(number), op == "<="


@dataclass(frozen=True)
class Keys:
    """The base of a component's keys (a frozen dataclass of :func:`key` fields)."""

    def check(self, config: Any) -> None:  # noqa: ANN401 - the whole run's config (RunConfig)
        """Rules between these keys and the rest of ``config``, once every key's own value is
        checked (raise :class:`ConfigError`); none by default."""


@dataclass(frozen=True)
class Declared:
    """A declared class: whose keys they are (``component``, words for ``--help-keys``), and which
    runs read them (``selector``: a common key, ``readers``: its values that read them; no
    selector: every run, or the registry entries that list the class)."""

    cls: type[Keys]
    component: str
    selector: str | None
    readers: tuple[str, ...]


_DECLARED: dict[type[Keys], Declared] = {}
_OWNER: dict[str, type[Keys]] = {}
K = TypeVar("K", bound=type[Keys])


def declare_keys(
    component: str | None = None, *, selector: str | None = None, readers: tuple[str, ...] = ()
) -> Callable[[K], K]:
    """Register a class of keys (a decorator, beside the code that reads them); ValueError naming
    the class for one that is not a frozen dataclass of documented keys, or a key declared already."""

    def add(cls: K) -> K:
        _declare(cls, component, selector, readers)
        return cls

    return add


def _declare(cls: type[Keys], component: str | None, selector: str | None, readers: tuple[str, ...]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Keys) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"declare_keys: {cls!r} is not a dataclass of Keys")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise ValueError(f"declare_keys: {cls.__name__} must be frozen (@dataclass(frozen=True))")
    for f in dataclasses.fields(cls):
        if not str(f.metadata.get("doc", "")).strip():
            raise ValueError(f"config key '{f.name}' of {cls.__name__} has no doc: declare it with key()")
        other = _OWNER.get(f.name)
        if other is not None and other is not cls:
            raise ValueError(f"config key '{f.name}' is declared by {other.__name__} already")
    name = component or cls.__name__.removesuffix("Keys").lower()
    _DECLARED[cls] = Declared(cls, name, selector, tuple(readers))
    for f in dataclasses.fields(cls):
        _OWNER[f.name] = cls


def forget(cls: type[Keys]) -> None:
    """Undo :func:`declare_keys` (a test's own class)."""
    _DECLARED.pop(cls, None)
    for name in [n for n, owner in _OWNER.items() if owner is cls]:
        del _OWNER[name]


def declared(cls: type[Keys] | None = None) -> Any:  # noqa: ANN401 - one entry, or all of them
    """The entry of ``cls``; without it, every declared class, by component (so the order does not
    depend on which module was imported first)."""
    if cls is None:
        return tuple(sorted(_DECLARED.values(), key=lambda entry: entry.component))
    return _DECLARED[cls]


def owner_of(name: str) -> type[Keys] | None:
    """The declared class holding key ``name``, or ``None`` (a common key, or no key)."""
    return _OWNER.get(name)


def component_fields() -> list[dataclasses.Field[Any]]:
    """Every declared key's field, class by class (:func:`declared`'s order)."""
    return [f for entry in declared() for f in dataclasses.fields(entry.cls)]
