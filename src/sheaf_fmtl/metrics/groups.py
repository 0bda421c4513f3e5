"""Run folders that repeat one configuration: group them (e.g. the seeds of a setting) and name
what differs between settings. Shared by ``sheaf-fmtl plot`` and anything that tabulates runs."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config import PROVENANCE_KEYS, RunConfig, renamed_keys
from ..data.bounded import read_text_bounded

# Keys that say where or how a run was executed, not what was computed (or that give the same
# iterates by design): two runs differing only in these are the same experiment.
BOOKKEEPING_KEYS = frozenset(
    {
        "data_dir",
        "data_search",
        "device",
        "save_maps",
        "stability_check",
        "message_mode",
        "map_defer",
        "processes",
    }
    | {"placement", "timeout_s", "transport", "tls_certs", "tls_peers", "silo"}
)


@dataclass(frozen=True)
class RunGroup:
    """Run folders whose configs agree on every key but the ignored ones.

    Attributes:
        runs: the run folders, in the order given.
        config: the shared config, flat (``data.*`` keys), without the ignored keys.
        varied: per ignored key present, its values over ``runs`` (e.g. ``{"seed": [0, 1, 2]}``).
    """

    runs: tuple[Path, ...]
    config: dict[str, Any]
    varied: dict[str, list[Any]]


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """``RUN/config.yaml`` as a dict. Raises FileNotFoundError (one line) when absent."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run folder (no config.yaml)")
    try:
        config = yaml.safe_load(read_text_bounded(path)) or {}
    except (OSError, ValueError, yaml.YAMLError) as e:  # (UnicodeDecodeError is a ValueError)
        raise ValueError(f"{path} cannot be read as a run config ({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a run config (not a mapping)")
    return renamed_keys(config)


def flat_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Nested options (``data: {k: v}``) as ``data.k`` keys; lists become tuples (hashable)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in flat_config(value).items()})
        else:
            out[key] = tuple(value) if isinstance(value, list) else value
    return out


@functools.cache
def _defaults() -> dict[str, Any]:
    """Today's default of every top-level config key (``data`` options are the dataset's; the other
    mappings, e.g. ``optimizer_args``, are empty: a run sets its ``KEY.NAME`` or none)."""
    return {k: v for k, v in RunConfig().to_dict().items() if not isinstance(v, dict)}


def run_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """``flat_config`` with each config key the run did not record filled with its default: a run
    written before a key existed ran as that key's default, so it matches today's runs that keep it."""
    flat = flat_config(config)
    return {**flat, **{k: v for k, v in _defaults().items() if k not in flat}}


def is_bookkeeping(key: str) -> bool:
    """Execution details (``data_dir``, ``device``, ...; see BOOKKEEPING_KEYS) and provenance
    (``versions.*``: the package and torch versions a run was recorded with)."""
    return key in BOOKKEEPING_KEYS or key.split(".")[0] in PROVENANCE_KEYS


def _experiment(config: Mapping[str, Any], ignore: Iterable[str]) -> dict[str, Any]:
    skip, keys = set(ignore), run_keys(config)
    unused = config.get("unused")
    if isinstance(unused, list):  # keys the run did not read (config.usage): as if left at their defaults
        keys.update({k: v for k, v in _defaults().items() if k in unused})
    return {k: v for k, v in keys.items() if k not in skip and not is_bookkeeping(k)}


def group_by_config(
    run_dirs: Sequence[str | Path],
    ignore: Sequence[str] = ("seed",),
    configs: Sequence[Mapping[str, Any]] | None = None,
) -> list[RunGroup]:
    """Group run folders whose ``config.yaml`` differ only in ``ignore`` (and bookkeeping keys).

    Args:
        run_dirs: run folders (each with a ``config.yaml``).
        ignore: flat keys allowed to differ inside a group (default: the seed).
        configs: the configs already read, one per run folder (read from disk when omitted).

    Returns:
        The groups in order of first appearance; runs keep their given order inside a group.
    """
    runs = [Path(r) for r in run_dirs]
    cfgs = [read_config(r) for r in runs] if configs is None else list(configs)
    if len(cfgs) != len(runs):
        raise ValueError(f"{len(runs)} run folders but {len(cfgs)} configs")
    order: dict[tuple[Any, ...], list[int]] = {}
    for i, cfg in enumerate(cfgs):
        key = tuple(sorted(_experiment(cfg, ignore).items(), key=lambda kv: kv[0]))
        order.setdefault(key, []).append(i)
    groups = []
    for members in order.values():
        flats = [run_keys(cfgs[i]) for i in members]
        varied = {k: [f.get(k) for f in flats] for k in ignore if any(k in f for f in flats)}
        shared = _experiment(cfgs[members[0]], ignore)
        groups.append(RunGroup(tuple(runs[i] for i in members), shared, varied))
    return groups


def differing_keys(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Flat keys (``data.*`` included) whose values are not all equal over ``configs`` (a config key
    a run did not record counts as its default, any other missing key as differing), bookkeeping
    keys left out; in first-seen order."""
    flats = [run_keys(c) for c in configs]
    keys = list(dict.fromkeys(k for f in flats for k in f))
    missing = object()
    return [k for k in keys if not is_bookkeeping(k) and len({repr(f.get(k, missing)) for f in flats}) > 1]
