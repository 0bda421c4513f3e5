"""``sheaf-fmtl run --resume RUN_DIR``: continue a stopped run (interrupted, killed, or diverged)
from its last complete checkpoint, with its saved config, to exactly the uninterrupted run's result.

Keys that do not change the mathematics may be given again (:data:`RESUMABLE_KEYS`; ``rounds`` may
be raised), unless the run's own config pins one (:data:`..checkpoints.integrity.PINNED`: ``rounds`` under
``lr_schedule = cosine``, whose curve spans the rounds); any other key that differs from the saved
``config.yaml`` is refused in one line. A run
folder without a complete checkpoint (stopped before its first one) starts again from round 0.

A run folder is data: its ``config.yaml`` is checked without importing the code it names, which is
refused unless the user names it again (or trusts the folder), and where it says to log
(:data:`DESTINATION_KEYS`) is not reused unless the user gives it again; one line says so.

A run over ``K`` processes is resumed over ``K`` processes (``sheaf-fmtl run --resume`` starts them,
:func:`sheaf_fmtl.runtime.run.launching.launch.resume_any`), each rank from its own shard; another count is
refused: a shard holds its rank's clients, maps and streams as stacked by that placement, and
re-sharding them is not implemented.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ....config import ConfigError, RunConfig, load_config, parse_overrides, read_config_file
from ....config.schema import default_of
from ....plugins import untrusted_specs
from ....spelling import option, setting
from ....warn import warn
from ...engine.simulate import Simulation
from ..callbacks.shipped_callbacks import check_kept_best
from ..checkpoints.checkpoint import remove_checkpoints
from ..checkpoints.checkpoint_read import read_manifest
from ..checkpoints.integrity import (
    RESUMABLE_KEYS,
    check_config,
    find_checkpoint,
    pinned,
    resumable_keys,
    verify_shards,
)
from ..folder.rundir import check_out_dir, claim
from ..loop import RunOutcome, execute
from ..stopping.interrupt import leave_summary

__all__ = ["DESTINATION_KEYS", "RESUMABLE_KEYS", "checkpoint_to_resume", "resume", "resume_config"]

#: Keys naming where a run writes or which server it talks to (the loggers' folders, MLflow's
#: tracking server, W&B's online mode): a resume takes them from the user, never from the folder's
#: ``config.yaml`` (:func:`dropped_destinations`).
DESTINATION_KEYS = ("log_tensorboard", "mlflow_tracking_uri", "wandb_dir", "wandb_mode", "tls_peers")


def resume_config(
    run_dir: str | Path,
    overrides: list[str] | None = None,
    keys: Mapping[str, Any] | None = None,
    *,
    group_member: bool = False,
    trust: bool = False,
) -> RunConfig:
    """The saved config of ``run_dir`` with ``overrides`` (``KEY=VALUE``) and ``keys`` on top.

    ``group_member``: a rank other than 0 of a process group (rank 0 holds the folder's lock).
    ``trust``: import the ``module:function`` plug-ins the saved config names; by default only
    those that ``overrides`` / ``keys`` name again are (a run folder never runs its own code). The
    :data:`DESTINATION_KEYS` the saved config sets are left at their defaults unless ``overrides``
    / ``keys`` give them (one warning line names them).

    Raises:
        ConfigError: ``run_dir`` has no ``config.yaml``; it names a plug-in not named again (and
            not ``trust``); a key outside :data:`RESUMABLE_KEYS` differs from the saved value.
    """
    check_out_dir(run_dir, resume=True, group_member=group_member)  # a folder sheaf-fmtl wrote, not a link
    path = Path(run_dir) / "config.yaml"
    if path.is_symlink() or not path.is_file():
        raise ConfigError(f"{option('resume', run_dir)}: no config.yaml there (not a run folder)")
    given = {**parse_overrides(overrides or []), **(keys or {})}
    received = read_config_file(path)  # (YAML only: nothing imported)
    if not trust:  # before anything else reads the folder's config
        refuse_code(run_dir, received, given)
    folder, _ = find_checkpoint(Path(run_dir))  # integrity next: an edited config.yaml imports nothing
    manifest = read_manifest(folder) if folder is not None else None
    if manifest is not None:
        check_config(Path(run_dir), manifest)
    check_kept_best(Path(run_dir))  # a best.pt that cannot be read or was swapped: refused, nothing changed
    dropped = dropped_destinations(received, given)
    note_dropped(run_dir, received, dropped)
    saved = load_config(path)
    config = load_config(path, overrides, {**(keys or {}), **dropped})
    old, new = saved.to_dict(), config.to_dict()
    may = resumable_keys(old)
    changed = [k for k in new if new[k] != old[k] and k not in may]
    if "processes" in changed:  # (under torchrun the group's size is checked by checkpoint_to_resume)
        raise ConfigError(
            f"{option('resume', run_dir)}: "
            f"processes = {new['processes']}, but the run ran on {old['processes']}: "
            "a run resumes over as many processes as it ran on (a shard cannot be split or merged): "
            f"give {setting('processes', old['processes'])} or leave processes out"
        )
    if changed:
        k = changed[0]
        why = pinned(k, old) or "changes its mathematics"
        raise ConfigError(
            f"{option('resume', run_dir)}: "
            f"config key '{k}' = {new[k]!r} differs from the run's {old[k]!r}, and "
            f"{why}; this resumed run may change only {', '.join(may)}: leave {k} out (or give "
            f"{setting(k, old[k])})"
        )
    return config


def refuse_code(run_dir: str | Path, received: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """ConfigError in one line when ``received`` (a run folder's config, as read) names a
    ``module:function`` or ``module:Class`` that ``given`` (the user's keys) does not name again;
    nothing is imported to tell (a torch class by name is no code of the folder's)."""
    untrusted = untrusted_specs(received, given)
    if untrusted:
        spec, key = next(iter(untrusted.items()))
        raise ConfigError(
            f"{option('resume', run_dir)}: "
            f"its config.yaml names code ({key} = {spec}), and a run folder never runs "
            f"its own code; if you trust it, name it again ({setting(key, spec)}) or pass "
            f"{option('trust_plugins', True)}"
        )


def dropped_destinations(received: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`DESTINATION_KEYS` that ``received`` (a run folder's config, as read) sets and
    ``given`` (the user's keys) does not name, each with its default: what the resumed run uses."""
    defaults = {k: default_of(k) for k in DESTINATION_KEYS}
    return {
        k: defaults[k]
        for k in DESTINATION_KEYS
        if k not in given and k in received and received[k] != defaults[k]
    }


def note_dropped(run_dir: str | Path, received: Mapping[str, Any], dropped: Mapping[str, Any]) -> None:
    """One warning line naming the keys of ``received`` that :func:`dropped_destinations` left out,
    and how to use them (give them again)."""
    if not dropped:
        return
    again = ", ".join(setting(k, received[k]) for k in dropped)
    warn(
        f"{option('resume', run_dir)}: not reused from its config.yaml, each left at its default (a run "
        f"folder does not choose where a run writes or which server it talks to): {', '.join(dropped)}; "
        f"to use one, give it again ({again})"
    )


def checkpoint_to_resume(
    run_dir: Path, config: RunConfig, processes: int, cleanup: bool = True
) -> Path | None:
    """The complete checkpoint folder to continue ``run_dir`` from (``None``: start again from round
    0); with ``cleanup``, the run's other checkpoint folders (writes cut short) are removed.

    Raises:
        ConfigError: the run finished; ``config.rounds`` is below the checkpoint's round; the
            checkpoint was written by another number of processes than ``processes``.
        CheckpointError: the checkpoint's manifest or a shard cannot be trusted, or
            ``config.yaml`` was edited since it was written (:mod:`..checkpoints.integrity`).
    """
    folder, skipped = find_checkpoint(run_dir)
    if folder is None and skipped:
        warnings.warn(
            f"{run_dir}: no complete checkpoint (the one of round {skipped[0]} was cut short); the run "
            "starts again from round 0",
            stacklevel=2,
        )
    if folder is None:
        if (run_dir / "summary.json").is_file() and (run_dir / "checkpoint.pt").is_file():
            raise ConfigError(
                f"{option('resume', run_dir)}: the run has no resumable checkpoint (it finished, or ran with "
                "checkpoint_every=0 and was not stopped by a signal)"
            )
        return None
    manifest = read_manifest(folder)
    assert manifest is not None
    check_config(run_dir, manifest)
    verify_shards(folder, manifest)
    if skipped:
        warnings.warn(
            f"{run_dir}: resuming from the checkpoint of round {manifest['round']}; the later one of "
            f"round {skipped[0]} was cut short (no manifest) and is removed",
            stacklevel=2,
        )
    if config.rounds < manifest["round"]:
        raise ConfigError(
            f"{option('resume', run_dir)}: rounds = {config.rounds} is below the round of its last "
            f"checkpoint, {manifest['round']}: give {setting('rounds', manifest['round'])} or more"
        )
    shards = len(manifest["shards"])
    if shards != processes:
        how = "`sheaf-fmtl run --resume` (or torchrun) with as many" if shards > 1 else "one process"
        raise ConfigError(
            f"{option('resume', run_dir)}: "
            f"its checkpoint was written by {shards} process(es), this resume has "
            f"{processes}; a shard cannot be split or merged: resume it with {how}"
        )
    if cleanup:
        remove_checkpoints(run_dir, keep=folder)  # writes cut short
    return folder


def resume(
    run_dir: str | Path,
    overrides: list[str] | None = None,
    keys: Mapping[str, Any] | None = None,
    *,
    progress: bool = False,
    build: Callable[[RunConfig], Simulation[Any]] | None = None,
    callbacks: Sequence[Any] = (),
    trust: bool = False,
) -> RunOutcome:
    """Continue the run of ``run_dir`` in this process from its last complete checkpoint (see the
    module docstring; a run checkpointed over several processes: :func:`.launch.resume_any`).
    Only a folder sheaf-fmtl wrote (its marker, :mod:`..folder.rundir`) and no other process runs in is
    resumed.

    Args:
        run_dir: a run folder written by :func:`sheaf_fmtl.runtime.run.loop.execute`.
        overrides: ``KEY=VALUE`` strings (only :data:`RESUMABLE_KEYS` may differ).
        keys: typed config keys (same rule).
        progress: show a progress bar.
        build: the simulation builder the run used (``sheaf_fmtl.scenarios.build`` for special
            cases).
        callbacks: as :func:`~sheaf_fmtl.runtime.run.loop.execute` takes them (for the rounds still to run).
        trust: import every plug-in the saved config names (:func:`resume_config`).
    Returns:
        The outcome, as :func:`~sheaf_fmtl.runtime.run.loop.execute` returns it.
    Raises:
        ConfigError: see :func:`resume_config` and :func:`checkpoint_to_resume`.
    """
    run_dir = Path(run_dir)
    config = resume_config(run_dir, overrides, keys, trust=trust)
    with claim(run_dir, resume=True), leave_summary(run_dir):  # held: a second resume is refused
        folder = checkpoint_to_resume(run_dir, config, 1)
        if folder is None:  # (clears only what the library wrote there)
            return execute(
                config, run_dir, progress=progress, build=build, overwrite=True, callbacks=callbacks
            )
        return execute(
            config, run_dir, progress=progress, build=build, resume_from=folder, callbacks=callbacks
        )
