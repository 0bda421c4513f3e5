"""What a checkpoint vouches for, and the checks a resume makes before it trusts one.

A checkpoint's ``manifest.json`` records the size and SHA-256 of every shard its folder holds (each
rank writes them beside its shard, ``shard-RRRRR.json``, and the manifest gathers them; ``held``
lists them when a machine's own ``--out`` holds only its ranks' shards) and a digest of
the run's ``config.yaml`` as resolved (the keys a resume of that run may change,
:func:`resumable_keys`, left out). A resume refuses, in one line naming the file and changing
nothing, a manifest that cannot be read, names a path outside its folder, lacks the size and digest
of a shard it holds or the config's digest (a check that cannot be made is a refusal), or names a
shard that is missing, truncated or altered, and a ``config.yaml`` edited since. A checkpoint
folder without a manifest is a write cut short: the previous complete checkpoint is used, and the
resume says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ....config import PROVENANCE_KEYS, ConfigError, read_config_file
from ....config.schedulers import rounds_dependent
from ....data.bounded import read_text_bounded
from ....metrics.final import file_digest
from ....spelling import option
from ..folder.rundir import CHECKPOINTS

#: Config keys a resumed run may change: none of them enters an iterate (``device`` changes the
#: float rounding, so the result is exact only on the device the run started on).
RESUMABLE_KEYS = (
    "rounds",
    "eval_every",
    "checkpoint_every",
    "save_maps",
    "data_dir",
    "data_search",
    "device",
    "timeout_s",
    "transport",
    "tls_certs",
    "tls_peers",
    "silo",
    "log_tensorboard",
    "log_mlflow",
    "mlflow_tracking_uri",
    "mlflow_experiment",
    "log_wandb",
    "wandb_project",
    "wandb_mode",
    "wandb_dir",
    "early_stop_patience",
    "early_stop_min_delta",
)
#: Keys of :data:`RESUMABLE_KEYS` that a run's own config pins, with the reason a resume says: a
#: step-size schedule that anneals over ``rounds`` follows another curve once ``rounds`` changes.
PINNED: dict[str, tuple[Callable[[Mapping[str, Any]], bool], str]] = {
    "rounds": (
        rounds_dependent,
        "lr_schedule = cosine anneals the step size over rounds (as an lr_scheduler does whose T_max or "
        "total_steps defaults to rounds), so the rounds still to run would follow another curve",
    ),
}
MANIFEST = "manifest.json"
FORMAT = 1
SHARD = re.compile(r"shard-(\d{5})\.pt")
ROUND_DIR = re.compile(r"round-(\d+)")


class CheckpointError(ValueError):
    """A checkpoint or run folder a resume cannot trust (one line naming the file)."""


def sidecar(shard: Path) -> Path:
    """Where a rank records its shard's digest: ``shard-RRRRR.json`` beside ``shard-RRRRR.pt``."""
    return shard.with_suffix(".json")


def pinned(key: str, config: Mapping[str, Any]) -> str | None:
    """Why the run of ``config`` (a mapping of its keys) may not change ``key`` on resume, though
    it is in :data:`RESUMABLE_KEYS` (``None``: it may)."""
    rule = PINNED.get(key)
    return rule[1] if rule is not None and rule[0](config) else None


def resumable_keys(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys a resume of the run of ``config`` may change: :data:`RESUMABLE_KEYS` less those
    its config pins (:data:`PINNED`)."""
    return tuple(k for k in RESUMABLE_KEYS if pinned(k, config) is None)


def run_config(run_dir: Path, kept: Collection[str] | None = None) -> dict[str, Any] | None:
    """The keys of ``run_dir/config.yaml`` that a resume may not change (``None``: unreadable).
    ``kept``: the keys of :data:`RESUMABLE_KEYS` to keep (those a checkpoint's manifest records in
    ``config``), so that reading a folder's config imports nothing; without it, those its config
    pins (:data:`PINNED`: an ``lr_scheduler`` given as ``module:Class`` is imported to tell)."""
    try:
        mapping = read_config_file(run_dir / "config.yaml")
    except ConfigError:
        return None
    may = resumable_keys(mapping) if kept is None else [k for k in RESUMABLE_KEYS if k not in kept]
    skip = {*PROVENANCE_KEYS, *may}
    values: dict[str, Any] = json.loads(
        json.dumps({k: v for k, v in mapping.items() if k not in skip}, default=str)
    )
    return values


def config_digest(mapping: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(mapping, sort_keys=True).encode()).hexdigest()


def _bad(path: Path, what: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} {what}; nothing was changed (remove its folder {path.parent} to resume "
        f"from an earlier checkpoint, if any, or start the run again with {option('overwrite', True)})"
    )


def check_manifest(folder: Path, *, shards: bool = True) -> dict[str, Any] | None:
    """The manifest of the checkpoint folder ``folder``: ``None`` when it has none (a write cut
    short); CheckpointError when it is unreadable, names a path outside ``folder``, or (``shards``)
    names a shard that is missing or whose size differs from the recorded one."""
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise _bad(path, "is not a regular file")
    try:
        manifest = json.loads(read_text_bounded(path))
    except (OSError, ValueError) as e:
        raise _bad(path, f"cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    found = ROUND_DIR.fullmatch(folder.name)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _bad(path, f"is not a checkpoint manifest of format {FORMAT}")
    if found is None or manifest.get("round") != int(found.group(1)):
        raise _bad(path, f"records round {str(manifest.get('round'))[:40]}, not its folder's")
    names = manifest.get("shards")
    if not isinstance(names, list) or not names or any(not isinstance(n, str) for n in names):
        raise _bad(path, "lists no shards")
    for rank, name in enumerate(names):
        if not SHARD.fullmatch(name) or int(name[6:11]) != rank:
            raise _bad(
                path, f"names {name[:80]!r}, not a shard file of its folder (refused: outside the run)"
            )
    held = manifest.get("held", names)
    if not isinstance(held, list) or not held or any(h not in names for h in held):
        raise _bad(path, "lists shards held in its folder that it does not name")
    files = manifest.get("files")
    for name in held:  # a checkpoint vouches for every shard it holds, or is not trusted
        shard = folder / name
        if shards and (shard.is_symlink() or not shard.is_file()):
            raise _bad(path, f"names shard {name}, which is missing (a partial checkpoint)")
        entry = files.get(name) if isinstance(files, dict) else None
        if (
            not isinstance(entry, dict)
            or type(entry.get("bytes")) is not int
            or not _hex(entry.get("sha256"))
        ):
            raise _bad(path, f"records no size and SHA-256 of {name} (it must vouch for every shard)")
        if shards and shard.stat().st_size != entry["bytes"]:
            size = shard.stat().st_size
            raise _bad(shard, f"has {size} bytes, its manifest says {entry['bytes']} (cut short or altered)")
    return manifest
    for name in held:
        shard = folder / name
        if shard.is_symlink() or not shard.is_file():
            raise _bad(path, f"names shard {name}, which is missing (a partial checkpoint)")
        want = files[name]["bytes"]
        if shard.stat().st_size != want:
            raise _bad(
                shard, f"has {shard.stat().st_size} bytes, its manifest says {want} (cut short or altered)"
            )
    return manifest


def _hex(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def verify_shards(folder: Path, manifest: dict[str, Any]) -> None:
    """Compare every shard's SHA-256 with the manifest's (CheckpointError naming the first that
    differs, or that the manifest records none for: :func:`check_manifest`)."""
    for name in manifest.get("held", manifest["shards"]):
        want = ((manifest.get("files") or {}).get(name) or {}).get("sha256")
        if not _hex(want) or file_digest(folder / name)["sha256"] != want:
            raise _bad(folder / name, "differs from the checksum its manifest recorded (corrupt)")


def check_config(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Refuse a ``config.yaml`` edited since the checkpoint ``manifest`` was written (importing
    nothing the config names: the manifest records which keys its digest covers)."""
    want = manifest.get("config_sha256")
    if not _hex(want) or not isinstance(manifest.get("config"), dict):
        where = run_dir / CHECKPOINTS / f"round-{manifest.get('round', 0):08d}" / MANIFEST
        raise CheckpointError(
            f"checkpoint {where} records "
            "no digest of the config it was written with, so the run it continues is unknown; nothing was "
            f"changed (start the run again with {option('overwrite', True)})"
        )
    now = run_config(run_dir, kept=manifest["config"])  # (imports nothing the folder names)
    if now is None or config_digest(now) != want:
        saved = manifest.get("config") or {}
        keys = [k for k in sorted({*saved, *(now or {})}) if (now or {}).get(k) != saved.get(k)]
        which = f" (key '{keys[0]}')" if keys else ""
        raise CheckpointError(
            f"{run_dir / 'config.yaml'} differs from the config its checkpoint was written with{which}; "
            "a resume continues the run as it started: restore the file, or start a new run with the "
            "new config (nothing was changed)"
        )


def find_checkpoint(run_dir: Path) -> tuple[Path | None, list[int]]:
    """The newest complete checkpoint folder of ``run_dir`` (checked, :func:`check_manifest`) and
    the rounds of newer folders without a manifest (cut short) passed over on the way."""
    base = run_dir / CHECKPOINTS
    if base.is_symlink():
        raise CheckpointError(f"{base} is a symbolic link; a resume never follows one (nothing was changed)")
    if not base.is_dir():
        return None, []
    found = sorted(
        ((int(m.group(1)), p) for p in base.iterdir() if (m := ROUND_DIR.fullmatch(p.name))), reverse=True
    )
    skipped: list[int] = []
    for round_, folder in found:
        if folder.is_symlink():
            raise CheckpointError(
                f"{folder} is a symbolic link; a resume never follows one (nothing was changed)"
            )
        if check_manifest(folder) is not None:
            return folder, skipped
        skipped.append(round_)
    return None, skipped
