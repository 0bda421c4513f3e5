"""``sheaf-fmtl run --resume RUN_DIR``: continue a stopped run (interrupted, killed, or diverged)
from its last complete checkpoint, with its saved config, to exactly the uninterrupted run's result.

Keys that do not change the mathematics may be given again (:data:`RESUMABLE_KEYS`; ``rounds`` may
be raised); any other key that differs from the saved ``config.yaml`` is refused in one line. A run
folder without a complete checkpoint (stopped before its first one) starts again from round 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..config import ConfigError, RunConfig, load_config
from .checkpoint import latest_checkpoint, read_manifest, remove_checkpoints
from .simulate import RunOutcome, Simulation, execute

#: Config keys a resumed run may change: none of them enters an iterate (``device`` changes the
#: float rounding, so the result is exact only on the device the run started on).
RESUMABLE_KEYS = ("rounds", "eval_every", "checkpoint_every", "save_maps", "data_dir", "device", "timeout_s")


def resume_config(
    run_dir: str | Path, overrides: list[str] | None = None, keys: Mapping[str, Any] | None = None
) -> RunConfig:
    """The saved config of ``run_dir`` with ``overrides`` (``KEY=VALUE``) and ``keys`` on top.

    Raises:
        ConfigError: ``run_dir`` has no ``config.yaml``, or a key outside :data:`RESUMABLE_KEYS`
            differs from the saved value.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a run folder)")
    saved = load_config(path)
    config = load_config(path, overrides, keys)
    old, new = saved.to_dict(), config.to_dict()
    changed = [k for k in new if new[k] != old[k] and k not in RESUMABLE_KEYS]
    if changed:
        k = changed[0]
        raise ConfigError(
            f"--resume {run_dir}: config key '{k}' = {new[k]!r} differs from the run's {old[k]!r} and "
            f"changes its mathematics; a resumed run may change only {', '.join(RESUMABLE_KEYS)}"
        )
    return config


def resume(
    run_dir: str | Path,
    overrides: list[str] | None = None,
    keys: Mapping[str, Any] | None = None,
    *,
    progress: bool = False,
    build: Callable[[RunConfig], Simulation[Any]] | None = None,
) -> RunOutcome:
    """Continue the run of ``run_dir`` from its last complete checkpoint (see the module docstring).

    Args:
        run_dir: a run folder written by :func:`sheaf_fmtl.runtime.simulate.execute`.
        overrides: ``KEY=VALUE`` strings (only :data:`RESUMABLE_KEYS` may differ).
        keys: typed config keys (same rule).
        progress: show a progress bar.
        build: the simulation builder the run used (``sheaf_fmtl.scenarios.build`` for special
            cases).
    Returns:
        The outcome, as :func:`~sheaf_fmtl.runtime.simulate.execute` returns it.
    Raises:
        ConfigError: see :func:`resume_config`; the run already finished; ``rounds`` below the
            checkpoint's round.
    """
    run_dir = Path(run_dir)
    config = resume_config(run_dir, overrides, keys)
    if getattr(config, "processes", 1) > 1:
        raise ConfigError(
            f"--resume {run_dir}: runs over several processes write no checkpoint yet; rerun it instead"
        )
    folder = latest_checkpoint(run_dir)
    if folder is None:
        if (run_dir / "summary.json").is_file() and (run_dir / "checkpoint.pt").is_file():
            raise ConfigError(
                f"--resume {run_dir}: the run has no resumable checkpoint (it finished, or ran with "
                "checkpoint_every=0 and was not stopped by a signal)"
            )
        return execute(config, run_dir, progress=progress, build=build, overwrite=True)
    manifest = read_manifest(folder)
    assert manifest is not None
    if config.rounds < manifest["round"]:
        raise ConfigError(
            f"--resume {run_dir}: rounds = {config.rounds} is below the round of its last checkpoint, "
            f"{manifest['round']}"
        )
    remove_checkpoints(run_dir, keep=folder)  # writes cut short
    return execute(config, run_dir, progress=progress, build=build, resume_from=folder)
