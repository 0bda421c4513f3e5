"""Configs as files: YAML reading (duplicate keys refused, one-line errors), ``KEY=VALUE``
overrides (dotted keys into ``data``), the layered :func:`load_config` and :func:`save_config`;
:func:`replace_file`, how the library writes every file of a run folder."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from ..data.bounded import UnboundedFile, read_text_bounded
from ..spelling import setting
from .errors import ConfigError, shown
from .schema import RunConfig, dict_keys, from_mapping
from .usage import unused_keys


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]  # (PyYAML ships no types)
    """SafeLoader that refuses a key given twice in one mapping (instead of keeping the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        try:
            first = seen.setdefault(key, line)
        except TypeError:  # unhashable key: SafeLoader reports it
            break
        if first != line:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {shown(key)} (first given on line {first})", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)
# YAML 1.1 (PyYAML) reads 1e3 and 1e-5 (no dot) as text; a config means the numbers (as YAML 1.2)
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


class _AmbiguousNumber(Exception):
    """A number YAML 1.1 reads otherwise than it reads to a person (``010`` is 8, ``1:30`` is 90)."""

    def __init__(self, node: yaml.ScalarNode, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


_LEADING_ZERO = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal: 010 is 8
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")  # base 60: 1:30 is 90


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    if _LEADING_ZERO.fullmatch(text):
        octal = loader.construct_yaml_int(node)
        raise _AmbiguousNumber(
            node,
            f"{text} has a leading zero, which YAML 1.1 reads as the octal number {octal}; write "
            f"{int(text.replace('_', ''))} for that many in decimal, or '{text}' for text",
        )
    if _SEXAGESIMAL.fullmatch(text):
        raise _AmbiguousNumber(node, _base60(loader, node, text))
    return int(loader.construct_yaml_int(node))


def _base60(loader: _UniqueKeyLoader, node: yaml.ScalarNode, text: str) -> str:
    value = loader.construct_yaml_float(node) if "." in text else loader.construct_yaml_int(node)
    return (
        f"{text} is read by YAML 1.1 as a base-60 number ({value}); write {value} for that number, "
        f"or '{text}' for text"
    )


def _construct_float(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> float:
    text = str(node.value)
    if _SEXAGESIMAL.fullmatch(text):
        raise _AmbiguousNumber(node, _base60(loader, node, text))
    return float(loader.construct_yaml_float(node))


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """One line for a YAML error: line, column and what is wrong."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        mark = e.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {e.problem}"
    return " ".join(str(e).split())


#: The most values a YAML config may hold once its aliases are expanded (a few nested aliases
#: stand for billions of values: the "billion laughs").
MAX_YAML_NODES = 100_000


class _RecursiveAlias(Exception):
    """A node that contains itself through an alias (``&a [*a]``): no finite value."""

    def __init__(self, node: yaml.Node) -> None:
        super().__init__(node)
        self.node = node


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes ``root`` stands for with every alias expanded (stops past the bound);
    :class:`_RecursiveAlias` for a node that contains itself (checked before any expansion)."""
    size: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are being counted (a cycle returns to one)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if done:
            open_.discard(id(node))
            size[id(node)] = min(1 + sum(size[id(c)] for c in children), MAX_YAML_NODES + 1)
        elif id(node) in open_:
            raise _RecursiveAlias(node)
        else:
            open_.add(id(node))
            stack.append((node, True))
            for c in children:
                if id(c) in open_:
                    raise _RecursiveAlias(c)
                if id(c) not in size:
                    stack.append((c, False))
    return size[id(root)]


def parse_yaml(text: str, where: str) -> Any:
    """``text`` read as YAML (duplicate keys refused, at most :data:`MAX_YAML_NODES` values with
    aliases expanded); ConfigError naming ``where`` otherwise."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_NODES:
            raise ConfigError(
                f"{where} holds more than {MAX_YAML_NODES} values once its aliases (*name) are expanded; "
                "a config is much smaller"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} is not valid YAML: {_yaml_problem(e)}") from None
    except _RecursiveAlias as e:
        line = e.node.start_mark.line + 1
        raise ConfigError(
            f"{where}: the value anchored on line {line} contains itself through an alias (*name); "
            "a config value cannot refer to itself"
        ) from None
    except RecursionError:
        raise ConfigError(f"{where} is nested too deeply to be a config") from None
    except _AmbiguousNumber as e:
        line = e.node.start_mark.line + 1
        at = f", line {line}" if "\n" in text.strip() or where.startswith("config file") else ""
        raise ConfigError(f"{where}{at}: {e.why}") from None
    finally:
        loader.dispose()


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["lam=0.1", "data.relatedness=0.5"]`` -> nested mapping; values parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(
                f"override {shown(item)} must look like KEY=VALUE (e.g. lam=0.1, data.groups=2)"
            )
        value = parse_yaml(raw, f"override {shown(item)}") if raw.strip() else ""
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {shown(item)}: '{shown(part)[1:-1]}' was already given a value")
        node[parts[-1]] = value
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file; ConfigError naming the file and the problem."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder; give a YAML file (e.g. {p / 'config.yaml'})")
    try:
        text = read_text_bounded(p, stream=True)  # (a config may come through a pipe: <(...))
    except UnboundedFile as e:
        raise ConfigError(f"config file {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"config file {p} cannot be read: {e.strerror}") from None
    loaded = parse_yaml(text, f"config file {p}") or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {p} must hold a mapping of keys to values")
    return loaded


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    keys: Mapping[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then the YAML file, then ``KEY=VALUE`` overrides, then ``keys`` (typed values,
    e.g. from CLI flags or Python keywords; ``data`` merged key by key); validated.

    Examples:
        >>> from sheaf_fmtl import load_config
        >>> config = load_config(overrides=["lam=0.1", "data.groups=2"], keys={"rounds": 5})
        >>> config.lam, config.data, config.rounds
        (0.1, {'groups': 2}, 5)
    """
    mapping: dict[str, Any] = dict(read_config_file(path)) if path is not None else {}
    layers = [parse_overrides(overrides or []), dict(keys or {})]
    for layer in layers:
        for key, value in layer.items():
            if key in dict_keys() and isinstance(value, dict) and isinstance(mapping.get(key, {}), dict):
                mapping[key] = {**mapping.get(key, {}), **value}
            elif isinstance(value, dict) and key not in dict_keys():
                subkeyed = ", ".join(f"{k}" for k in dict_keys())
                raise ConfigError(
                    f"config key '{key}' takes one value, not a mapping: give {setting(key)} (only "
                    f"{subkeyed} hold options, e.g. {setting('data.relatedness', 0.5)})"
                )
            else:
                mapping[key] = value
    return from_mapping(mapping)


def save_config(config: RunConfig, path: str | Path, provenance: Mapping[str, Any] | None = None) -> None:
    """``config`` as YAML (rerun it with ``sheaf-fmtl run PATH``), then ``unused`` (the keys it
    sets that the run does not read, :mod:`.usage`) and ``provenance`` keys (:data:`PROVENANCE_KEYS`,
    e.g. the package and torch versions), which reading ignores."""
    text = yaml.safe_dump(config.to_dict(), sort_keys=False)
    unused = unused_keys(config)
    if unused:
        text += yaml.safe_dump({"unused": unused}, sort_keys=False)
    if provenance:
        text += yaml.safe_dump(dict(provenance), sort_keys=False)
    replace_file(path, text)


def replace_file(path: str | Path, content: str | bytes | Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` whole: ``content`` (text as UTF-8, bytes, or a function writing into the
    file) goes to a new temporary file beside it, which is then renamed onto ``path``. A symbolic
    link at ``path`` is replaced by the file, never written through; a reader sees the old file or
    the new one, never a part."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.tmp", dir=p.parent)  # O_EXCL: a new file
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode() if isinstance(content, str) else content)
        os.chmod(tmp, 0o666 & ~_UMASK)  # (mkstemp makes it 0600) as open() would
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()  # (read once, on import: os.umask cannot be read without setting it)
