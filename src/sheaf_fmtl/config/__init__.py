"""Typed run configuration: YAML file + ``KEY=VALUE`` overrides (dotted keys into ``data``),
validated when a :class:`RunConfig` is built (one place for the CLI and Python), saved resolved
with every run.

- :mod:`.schema`: :class:`RunConfig` (every key, its default and its checks), :class:`ConfigError`;
- :mod:`.files`: YAML files and overrides, :func:`load_config`, :func:`save_config`;
- :mod:`.usage`: which keys each algorithm, map mode, graph kind and protocol reads, and the rule
  for keys a run ignores.
"""

from __future__ import annotations

from .files import load_config, parse_overrides, parse_yaml, read_config_file, save_config
from .schema import PROVENANCE_KEYS, ConfigError, RunConfig, from_mapping, validate

__all__ = [
    "PROVENANCE_KEYS",
    "ConfigError",
    "RunConfig",
    "from_mapping",
    "load_config",
    "parse_overrides",
    "parse_yaml",
    "read_config_file",
    "save_config",
    "validate",
]
