"""Starting a run, one way for every command and the Python API (:func:`launch`): ``sheaf-fmtl run``
(and ``--resume``), ``run --seeds``, ``sweep``, ``reproduce`` (the frontier too), ``demo`` and
:func:`sheaf_fmtl.run` each hand it their run, so the process layout a config asks for and the
checks made before a run starts are the same for all of them.

- Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` in the environment, e.g. ``torchrun
  --nproc-per-node K -m sheaf_fmtl run CONFIG``), this process is one rank: it joins the group
  (``env://`` rendezvous on the address torchrun was given; Gloo on the CPU, NCCL with
  ``device=cuda``), builds only its clients, and runs; rank 0 writes the run folder and prints,
  every rank writes its shard of each checkpoint (:mod:`..checkpoints.checkpoint`), and ``run
  --resume`` continues such a run over as many ranks. So does one silo of several machines
  (``transport = tls`` with ``silo`` set).
- ``processes = K`` (no torchrun): the command starts ``K`` such ranks itself, on this machine,
  with a rendezvous through a temporary file (no TCP listener) and Gloo's connections on the
  loopback interface only, and waits for them (the ranks run quietly; rank 0's warnings are shown
  when they end). A rank that dies ends the
  others within ``timeout_s``; the error line names it, and the round the others reached.
- The ranks outlive no launcher: each gets SIGTERM when the process that started it ends (Linux's
  ``PR_SET_PDEATHSIG``; elsewhere a watchdog thread on the parent's pid), so a killed launcher's
  ranks stop after the same round with a checkpoint, as on Ctrl-C. They inherit the run folder's
  lock (:mod:`..folder.rundir`), so ``--resume`` / ``--overwrite`` of the folder are refused while
  any of them lives, and a folder whose ranks ended resumes as usual.
- Otherwise the run is made in this process (in memory when it has no run folder).

Being one rank: :mod:`.rank`; starting ``K`` ranks locally: :mod:`.spawn`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
    from ...engine.simulate import Simulation
    from ..loop import RunOutcome

    #: What :func:`launch` returns: the outcome of a run made in this process, rank 0's summary
    #: when ranks made it, ``None`` on a rank other than 0 (rank 0 reports the run).
    Launched = RunOutcome | dict[str, Any] | None


@dataclass(frozen=True)
class Resume:
    """What :func:`launch` continues instead of starting a run: the stopped run of the folder it is
    given, with that folder's own config and ``overrides`` (``KEY=VALUE``) and ``keys`` on top (only
    the keys of :data:`.resume.RESUMABLE_KEYS` may differ). ``trust``: import the plug-ins the
    folder's config names (:func:`.resume.resume_config`)."""

    overrides: list[str] | None = None
    keys: Mapping[str, Any] | None = None
    trust: bool = False


def launch(
    run: RunConfig | Resume,
    out: Path | None,
    *,
    progress: bool,
    overwrite: bool = False,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
    sim: Simulation[Any] | None = None,
) -> Launched:
    """Make the run ``run`` (a config, into the run folder ``out``; in memory when ``None``), or
    continue the stopped run of ``out`` (a :class:`Resume`), in the layout its config asks for: one
    rank of a group (torchrun's, :func:`spawn`'s child, a silo), ``processes = K`` ranks started here,
    or this process.

    ``overwrite``: accept and clear a non-empty ``out``. ``build``: the simulation's builder (the
    special cases: :func:`sheaf_fmtl.scenarios.build`). ``callbacks``: run after every round and at
    the end, in this process or in each rank (:mod:`..callbacks.callbacks`). ``sim``: a simulation
    built from the config in this process (one process only). Returns what :data:`Launched` says.
    Raises ConfigError (one line) for what the layout refuses (:func:`refuse_across_processes`)."""
    if isinstance(run, Resume):
        if sim is not None:
            raise ConfigError("a resume builds its simulation from the run folder's config; give no sim")
        assert out is not None  # (a resume continues a folder)
        return resume_any(
            out, run.overrides, run.keys, progress=progress, build=build, callbacks=callbacks, trust=run.trust
        )
    ranks = rank_world()
    if ranks is not None or one_silo(run):  # (the ranks run the callbacks, each its own)
        refuse_across_processes(run, out, (), sim, ranks=ranks[1] if ranks is not None else run.processes)
        assert out is not None
        return run_rank(run, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks)
    return dispatch(
        run, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks, sim=sim
    )


def summary_of(launched: Launched) -> dict[str, Any] | None:
    """The summary :func:`launch`'s run reports (``None`` on a rank other than 0)."""
    return launched if launched is None or isinstance(launched, dict) else launched.summary


def one_silo(config: RunConfig) -> bool:
    """This process is one silo of several machines (``transport = tls`` with ``silo`` set)."""
    return config.transport == "tls" and config.silo is not None


def refuse_across_processes(
    config: RunConfig, out: Path | None, callbacks: Sequence[Any], sim: Any, *, ranks: int | None = None
) -> None:
    """Refuse in one line (:class:`ConfigError`) what ranks cannot be handed: no run folder, where
    they hand their results over; ``callbacks`` of this process, which would not run in ranks
    started here; a simulation built in this process. ``ranks``: the size of the group this process
    is one rank of (else the ranks are the ``processes`` this process starts)."""
    if ranks is None:
        what, alone = f"config key 'processes' = {config.processes}", f"run with {setting('processes', 1)}"
    else:
        what, alone = f"this process is one of {ranks} ranks", "start it as one process"
    if out is None:
        raise ConfigError(
            f"{what}: the ranks hand their results over in the run "
            f"folder; give {option('out', 'FOLDER')} (or {alone})"
        )
    if callbacks:
        raise ConfigError(f"{what}: callbacks run in this process, not in the ranks; {alone} to use them")
    if sim is not None:
        raise ConfigError(f"{what}: a simulation built in this process runs in no other; {alone}")


def dispatch(
    config: RunConfig,
    out: Path | None,
    *,
    progress: bool,
    overwrite: bool,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
    sim: Simulation[Any] | None = None,
) -> RunOutcome | dict[str, Any]:
    """A new run of ``config`` started here (:func:`launch` outside a group): ``processes = K > 1``
    starts ``K`` ranks on this machine (:func:`spawn`), which write the run folder ``out``, and
    returns rank 0's summary; else runs in this process (into ``out``, or in memory when ``None``)
    and returns its :class:`..loop.RunOutcome`."""
    from ..loop import execute

    if config.processes > 1:
        refuse_across_processes(config, out, callbacks, sim)
        assert out is not None
        return spawn(config, out, progress=progress, overwrite=overwrite)
    owned = claim(out, overwrite=overwrite) if out is not None else contextlib.nullcontext()
    with owned, interrupt.leave_summary(out):
        return execute(
            config, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks, sim=sim
        )


def refuse_in_a_rank() -> None:
    """A command that makes several runs (``run --seeds``, ``sweep``, ``reproduce``, ``demo``) starts
    each run's ranks itself (:func:`launch`); as one rank of ``torchrun`` it is refused in one line
    (every rank would make every run)."""
    if rank_world() is not None:
        raise ConfigError(
            "run --seeds, sweep, reproduce and demo start the processes of each run themselves "
            f"({setting('processes', 'K')}); start them without torchrun"
        )


def resume_any(
    run_dir: Path,
    overrides: list[str] | None = None,
    keys: Mapping[str, Any] | None = None,
    *,
    progress: bool,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
    trust: bool = False,
) -> Launched:
    """A resume of ``run_dir`` (:func:`launch` given a :class:`Resume`): a rank continues from its own
    shard (the checkpoint chosen before the group meets, so rank 0's clean-up cannot race the others'
    reads), ``processes = K`` starts ``K`` ranks that do so (after the same checks here, so a bad
    resume is refused before any rank starts), one process resumes in place
    (:func:`.resume.resume`). ``trust``: import the plug-ins the folder's config names
    (:func:`.resume.resume_config`)."""
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
                callbacks=callbacks,
                resume_from=folder,
                resuming=True,
            )
    if config.processes > 1:
        refuse_across_processes(config, run_dir, callbacks, None)
        with claim(run_dir, resume=True):
            checkpoint_to_resume(run_dir, config, config.processes)
            return spawn(config, run_dir, progress=progress, overwrite=False, resume=True)
    return resume(run_dir, overrides, keys, progress=progress, build=build, callbacks=callbacks, trust=trust)
