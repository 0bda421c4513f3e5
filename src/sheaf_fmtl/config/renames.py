"""Former key names as they read now: ``partition = contiguous | community`` (the former name of
``placement``) in a config being built and in a recorded one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spelling import setting
from ..warn import warn
from .errors import ConfigError
from .values import PLACEMENTS


def placement_renamed(config: Any, default: str) -> None:  # noqa: ANN401 - a RunConfig being built
    """``partition = contiguous | community`` (the former name of ``placement``, as old configs and
    run folders' ``config.yaml`` hold it) read as ``placement``, with one warning."""
    old = config.partition
    if old not in PLACEMENTS:
        return
    given = config.placement
    if given not in (old, default):
        raise ConfigError(
            f"config key 'partition' = {old} is the former name of 'placement', which is given as {given}; "
            f"give {setting('placement', old)} or {setting('placement', given)} alone"
        )
    warn(
        f"config key 'partition' = {old} is read as {setting('placement', old)} (renamed; 'partition' now "
        "splits a pooled dataset over the clients); write placement",
        FutureWarning,
    )
    object.__setattr__(config, "placement", old)
    object.__setattr__(config, "partition", "none")


def renamed_keys(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded config (a run folder's ``config.yaml``, a cell's ``cell.json``) with its former key
    names as they read now: ``partition = contiguous | community`` as ``placement`` (no warning)."""
    out = dict(mapping)
    if out.get("partition") in PLACEMENTS:
        out["placement"] = out.pop("partition")
    return out
