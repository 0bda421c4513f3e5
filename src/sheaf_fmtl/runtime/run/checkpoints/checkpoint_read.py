"""Reading a run folder's checkpoints (written by :mod:`.checkpoint`, whose docstring gives the
layout): the complete checkpoint with the highest round, its manifest and one rank's shard. A
manifest or shard that cannot be trusted is refused (:mod:`.integrity`); a folder without a manifest
(a write cut short) is not a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .integrity import (
    MANIFEST,
    CheckpointError,
    check_manifest,
    find_checkpoint,
)

if TYPE_CHECKING:
    pass


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of a complete checkpoint folder, ``None`` when it has none (a write cut short);
    CheckpointError when it is unreadable or names a shard that is missing or of another size
    (:func:`.integrity.check_manifest`)."""
    return check_manifest(folder)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The complete checkpoint folder of ``run_dir`` with the highest round, or ``None``
    (CheckpointError for one that cannot be trusted: :func:`.integrity.find_checkpoint`)."""
    return find_checkpoint(Path(run_dir))[0]


def read_checkpoint(folder: Path, rank: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(manifest, shard of rank)`` of a complete checkpoint folder (CheckpointError naming the
    file when it cannot be read)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise CheckpointError(f"{folder} is not a complete checkpoint (no {MANIFEST})")
    name = manifest["shards"][rank]
    if name not in manifest.get("held", manifest["shards"]):
        raise CheckpointError(
            f"{folder} holds no shard of rank {rank} (its machine's --out holds it): resume every machine "
            "from the --out it ran with; nothing was changed"
        )
    path = folder / name
    try:
        shard = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling, zip and truncation errors alike
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(
            f"checkpoint shard {path} cannot be read ({first}); nothing was changed"
        ) from None
    if not isinstance(shard, dict):
        raise CheckpointError(f"checkpoint shard {path} does not hold a shard; nothing was changed")
    return manifest, shard
