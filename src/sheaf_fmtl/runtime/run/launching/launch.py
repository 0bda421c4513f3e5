"""Launching a run over several processes: as one rank of ``torchrun``, or ``processes = K`` locally.

- Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` in the environment, e.g. ``torchrun
  --nproc-per-node K -m sheaf_fmtl run CONFIG``), this process is one rank: it joins the group
  (``env://`` rendezvous on the address torchrun was given; Gloo on the CPU, NCCL with
  ``device=cuda``), builds only its clients, and runs; rank 0 writes the run folder and prints,
  every rank writes its shard of each checkpoint (:mod:`..checkpoints.checkpoint`), and ``run --resume``
  continues such a run over as many ranks (:func:`resume_any`).
- ``processes = K`` (no torchrun): the command starts ``K`` such ranks itself, on this machine,
  with a rendezvous through a temporary file (no TCP listener) and Gloo's connections on the
  loopback interface only, and waits for them (the ranks run quietly; rank 0's warnings are shown
  when they end). A rank that dies ends the
  others within ``timeout_s``; the error line names it, and the round the others reached.
- The ranks outlive no launcher: each gets SIGTERM when the process that started it ends (Linux's
  ``PR_SET_PDEATHSIG``; elsewhere a watchdog thread on the parent's pid), so a killed launcher's
  ranks stop after the same round with a checkpoint, as on Ctrl-C. They inherit the run folder's
  lock (:mod:`..folder.rundir`), so ``--resume`` / ``--overwrite`` of the folder are refused while any of
  them lives, and a folder whose ranks ended resumes as usual.

Being one rank: :mod:`.rank`; starting ``K`` ranks locally: :mod:`.spawn`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....config import ConfigError, RunConfig
from ....spelling import option, setting
from ..folder.rundir import claim
from ..stopping import interrupt
from .rank import run_rank
from .rankenv import rank_world
from .spawn import spawn

if TYPE_CHECKING:
    from ..loop import RunOutcome


def run_any(
    config: RunConfig, out: Path, *, progress: bool, overwrite: bool, build: Callable[..., Any] | None = None
) -> dict[str, Any] | None:
    """The ``run`` command's dispatch: a rank (torchrun or :func:`spawn`'s child), else
    :func:`dispatch`; the summary to print (``None`` on ranks other than 0)."""
    if rank_world() is not None or one_silo(config):
        return run_rank(config, out, progress=progress, overwrite=overwrite, build=build)
    ran = dispatch(config, out, progress=progress, overwrite=overwrite, build=build)
    return ran if isinstance(ran, dict) else ran.summary


def one_silo(config: RunConfig) -> bool:
    """This process is one silo of several machines (``transport = tls`` with ``silo`` set)."""
    return config.transport == "tls" and config.silo is not None


def dispatch(
    config: RunConfig,
    out: Path | None,
    *,
    progress: bool,
    overwrite: bool,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
) -> RunOutcome | dict[str, Any]:
    """One run of ``config``, for ``sheaf-fmtl run`` and :func:`sheaf_fmtl.run` alike: ``processes =
    K > 1`` starts ``K`` ranks on this machine (:func:`spawn`), which write the run folder ``out``,
    and returns rank 0's summary; else runs in this process (into ``out``, or in memory when
    ``None``) and returns its :class:`..loop.RunOutcome`. ``K`` ranks are refused in one line
    (:class:`ConfigError`) without a run folder, where they hand their results over, and with
    ``callbacks``, which would run in this process, not in the ranks."""
    from ..loop import execute

    if config.processes > 1:
        if out is None:
            raise ConfigError(
                f"config key 'processes' = {config.processes}: the ranks hand their results over in the run "
                f"folder; give {option('out', 'FOLDER')} (or run with {setting('processes', 1)})"
            )
        if callbacks:
            raise ConfigError(
                f"config key 'processes' = {config.processes}: callbacks run in this process, not in the "
                f"ranks; run with {setting('processes', 1)} to use them"
            )
        return spawn(config, out, progress=progress, overwrite=overwrite)
    owned = claim(out, overwrite=overwrite) if out is not None else contextlib.nullcontext()
    with owned, interrupt.leave_summary(out):
        return execute(config, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks)


def refuse_in_a_rank() -> None:
    """A command that makes several runs (``run --seeds``, ``sweep``, ``reproduce``, ``demo``) starts
    each run's ranks itself (:func:`dispatch`); as one rank of ``torchrun`` it is refused in one line
    (every rank would make every run)."""
    if rank_world() is not None:
        raise ConfigError(
            "run --seeds, sweep, reproduce and demo start the processes of each run themselves "
            f"({setting('processes', 'K')}); start them without torchrun"
        )


def resume_any(
    run_dir: Path,
    overrides: list[str] | None = None,
    keys: dict[str, Any] | None = None,
    *,
    progress: bool,
    build: Callable[..., Any] | None = None,
    trust: bool = False,
) -> dict[str, Any] | None:
    """``run --resume RUN_DIR``'s dispatch, as :func:`run_any`: a rank continues from its own shard
    (the checkpoint chosen before the group meets, so rank 0's clean-up cannot race the others'
    reads), ``processes = K`` starts ``K`` ranks that do so (after the same checks here, so a bad
    resume is refused before any rank starts), one process resumes in place
    (:func:`.resume.resume`). The summary to print (``None`` on ranks other than 0).
    ``trust``: import the plug-ins the folder's config names (:func:`.resume.resume_config`)."""
    from .resume import checkpoint_to_resume, resume, resume_config

    ranks = rank_world()
    member = ranks is not None and ranks[0] != 0  # rank 0 holds the folder's lock for the group
    config = resume_config(run_dir, overrides, keys, group_member=member, trust=trust)
    if ranks is None and one_silo(config):  # a silo of several machines, each with its own folder
        ranks = (int(config.silo or 0), config.processes)
    if ranks is not None:
        lead = ranks[0] == 0
        with claim(run_dir, resume=True) if lead else contextlib.nullcontext():
            folder = checkpoint_to_resume(run_dir, config, ranks[1], cleanup=lead)
            return run_rank(
                config,
                run_dir,
                progress=progress,
                overwrite=False,
                build=build,
                resume_from=folder,
                resuming=True,
            )
    if config.processes > 1:
        with claim(run_dir, resume=True):
            checkpoint_to_resume(run_dir, config, config.processes)
            return spawn(config, run_dir, progress=progress, overwrite=False, resume=True)
    return resume(run_dir, overrides, keys, progress=progress, build=build, trust=trust).summary
