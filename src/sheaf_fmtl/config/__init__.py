"""Typed run configuration: YAML file + ``KEY=VALUE`` overrides (dotted keys into ``data``),
validated when a :class:`RunConfig` is built (one place for the CLI and Python), saved resolved
with every run.

- :mod:`.schema`: :class:`RunConfig` and each key's own check; its keys, with their defaults and docs,
  in sections (:mod:`.keys`, :mod:`.keys_run`); the values each key allows (:mod:`.values`), the
  rules between keys (:mod:`.rules`), defaults that depend on the problem (:mod:`.defaults`);
  :class:`ConfigError` (:mod:`.errors`);
- :mod:`.files`: YAML files and overrides, :func:`load_config`, :func:`save_config`;
- :mod:`.usage`: which keys each algorithm, map mode, graph kind and protocol reads, and the rule
  for keys a run ignores.
"""

from __future__ import annotations

from .errors import ConfigError
from .files import load_config, parse_overrides, parse_yaml, read_config_file, save_config
from .renames import renamed_keys
from .schema import PROVENANCE_KEYS, RunConfig, from_mapping, validate

__all__ = [
    "PROVENANCE_KEYS",
    "ConfigError",
    "RunConfig",
    "from_mapping",
    "load_config",
    "parse_overrides",
    "parse_yaml",
    "read_config_file",
    "renamed_keys",
    "save_config",
    "validate",
]
