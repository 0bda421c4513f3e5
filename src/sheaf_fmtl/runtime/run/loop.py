"""The round loop of a run (:func:`execute`): rounds, evaluations, checkpoints, the stop on a
signal, divergence, and the run folder's summary; in one process or as one rank of several.

Across processes every rank runs this loop over its shard (:mod:`.launch`); every decision that
ends or records a round (divergence, a stop by a signal, an evaluation) is taken from all-reduced
numbers, so all ranks take it at the same round. Rank 0 writes the run folder; every rank writes
its shard of each checkpoint (:class:`.checkpoint.CheckpointWriter`). Callbacks
(:mod:`.callbacks`) run after every round; a stop one asks for is agreed the same way.

Why one module of this size: the phases of a run (prepare, rounds, finish) share one state, and
across processes every rank must run their collectives in the same order; in one file that order
reads from top to bottom.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ... import progress
from ...config import ConfigError, RunConfig
from ...config.usage import UnusedKeysWarning, unused_warning
from ...data import preprocessing
from ...metrics.flops import SampleCounter
from ...metrics.memory import reset_peak_memory
from ...warn import warn
from ..engine.divergence import divergence_message
from ..engine.simulate import DivergenceError, Simulation, build_simulation
from .agreement import RoundAgreement
from .callbacks import Hooks, RunView, agreed, checked, from_config
from .checkpoint import (
    CheckpointWriter,
    rank_and_world,
    read_checkpoint,
    remove_checkpoints,
    restore,
    snapshot,
)
from .disks import adopt_folder, common_checkpoint, folder_ranks
from .full import disk_full
from .gather import final_state
from .interrupt import StopRequest
from .ledger import entry_names
from .recorder import Recorder
from .rundir import check_out_dir, prepare_out_dir, record_written
from .summary import config_with_clients, summarize


@dataclass
class RunOutcome:
    """What a run produced: the summary, the evaluated rows (``metrics.csv``'s), the final
    state (``checkpoint.pt``'s payload: thetas per client, edges, maps or their norms) and the
    config as run (``config.yaml``'s: a special case fixes some keys)."""

    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    final: dict[str, Any]
    config: RunConfig


def run(
    config: RunConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    sim: Simulation[Any] | None = None,
    overwrite: bool = False,
    build: Callable[[RunConfig], Simulation[Any]] | None = None,
    resume_from: Path | None = None,
) -> dict[str, Any]:
    """Run ``config`` and write the run folder; returns the summary (see :func:`execute`)."""
    outcome = execute(
        config, out_dir, progress=progress, sim=sim, overwrite=overwrite, build=build, resume_from=resume_from
    )
    return outcome.summary


def execute(
    config: RunConfig,
    out_dir: str | Path | None,
    *,
    progress: bool = False,
    sim: Simulation[Any] | None = None,
    overwrite: bool = False,
    build: Callable[[RunConfig], Simulation[Any]] | None = None,
    resume_from: Path | None = None,
    callbacks: Sequence[Any] = (),
    agreement: RoundAgreement | None = None,
) -> RunOutcome:
    """Run ``config`` (into the run folder ``out_dir``, or in memory when ``None``).

    Args:
        config: the run's settings.
        out_dir: a new or empty folder (a non-empty one only with ``overwrite``, which clears it
            once the run has been built); checked before any work. Across processes every rank
            is given it: rank 0 writes the run folder, every rank its checkpoint shards.
        progress: show progress (a bar on a terminal, else a line every so many rounds).
        sim: a simulation built elsewhere from ``config`` (e.g. with hand-made maps,
            :mod:`sheaf_fmtl.scenarios`, or one rank's shard, :mod:`.launch`).
        overwrite: accept and clear a non-empty ``out_dir``.
        build: builds the simulation from ``config`` after the folder check (default
            :func:`.simulate.build_simulation`; :func:`sheaf_fmtl.scenarios.build` also builds the
            special cases named by ``topology``, which sit above this layer).
        resume_from: a complete checkpoint folder of ``out_dir`` (:mod:`.checkpoint`): continue
            the stopped run of ``out_dir`` from it (see :func:`sheaf_fmtl.runtime.run.resume.resume`);
            across processes each rank reads its own shard.
        callbacks: objects with ``on_round_end(round, metrics, view)`` and/or ``on_run_end(summary)``
            (:mod:`.callbacks`), after those the config's keys ask for (``log_tensorboard``,
            ``early_stop_patience``); one that returns a ``Stop`` ends the run after that round with
            a checkpoint, recorded with ``status = stopped`` and ``stopped_by``.
        agreement: what the ranks agree after each round, when a launched rank's signal handling
            already holds it (:mod:`.launch`); by default the loop makes its own.
    Returns:
        The summary, rows and final state. Every ``checkpoint_every`` rounds (default: every
        evaluation) ``out_dir`` gets a resumable checkpoint, written in the background. SIGINT /
        SIGTERM stop the run after the current round with a checkpoint: it is then recorded like a
        finished one with ``status = interrupted``, ``rounds_done`` and ``signal`` in the summary.
        A finished run keeps no resumable checkpoint (``checkpoint.pt`` holds its final state).
    Raises:
        DivergenceError: the loss became NaN or infinite; the folder keeps ``metrics.csv`` up to
            the last good evaluation, the last checkpoint, and a summary with ``status = diverged``
            and no final metric.
    """
    hooks = Hooks([*from_config(config), *checked(callbacks)])
    state = _prepare(config, out_dir, resume_from, agreement, sim=sim, overwrite=overwrite, build=build)
    before = entry_names(state.folder)  # what appears in the folder from now on is the run's
    try:
        return _run(state, progress, hooks, resumed=resume_from is not None)
    except OSError as e:  # a full disk: one line naming the folder and what it kept
        raise disk_full(state.folder, state.recorder.rows, e) from None
    finally:
        if state.folder is not None:  # (a callback's files, a TensorBoard folder: --overwrite clears them)
            record_written(state.folder, before)


def _run(state: _RunState, progress: bool, hooks: Hooks, *, resumed: bool) -> RunOutcome:
    """The round loop, the summary and final checkpoint, then the callbacks' ``on_run_end``."""
    try:
        ending = _loop(state, progress, hooks)
    finally:
        state.counter.detach()
        state.recorder.close()
    outcome = _finish(state, ending, resumed=resumed)
    hooks.run_end(outcome.summary)
    return outcome


@dataclass
class _RunState:
    """What the phases of one run share: the simulation and what records it."""

    config: RunConfig  # as it runs (a special case fixes some keys)
    sim: Simulation[Any]
    folder: Path | None  # the run folder, on the rank that writes it
    recorder: Recorder
    counter: SampleCounter  # samples behind every local gradient, for flops_local
    writer: CheckpointWriter
    agreement: RoundAgreement  # across processes: a signal's stop, checkpoint writes settled
    t0: float  # perf_counter at the start (moved back by a resumed run's time)
    start: int  # the last round done before this process's first round
    last: dict[str, Any]  # the latest evaluation
    notes: list[str] = field(default_factory=list)  # warnings, in summary.json

    def warn(self) -> None:
        """Print and keep the simulation's new warnings."""
        for note in self.sim.diagnose():
            self.notes.append(note)
            progress.note(f"sheaf-fmtl: warning: {note}")

    def save(self, k: int, last: dict[str, Any], rows: int, wait: bool) -> None:
        """Checkpoint round ``k``, with the evaluations an uninterrupted run has by then."""
        elapsed = time.perf_counter() - self.t0
        rows_so_far = self.recorder.rows[:rows]
        manifest = {"rows": rows_so_far, "last": last, "notes": list(self.notes), "wall_seconds": elapsed}
        manifest["maps_auto"] = self.sim.maps_chosen  # config.yaml holds the chosen mode, not why
        manifest["lam_rule"] = self.sim.lam_rule  # nor how its lam was derived
        self.writer.save(k, snapshot(self.sim, self.counter, guard=self.writer.join), manifest, wait=wait)


@dataclass
class _Ending:
    """How the round loop ended: the last round done, and a divergence or a signal."""

    done: int
    diverged_at: int | None = None
    signum: int | None = None  # the signal that stopped the run
    stopped_by: tuple[str, str] | None = None  # (callback, reason) of a callback's stop request


def _prepare(
    config: RunConfig,
    out_dir: str | Path | None,
    resume_from: Path | None,
    agreement: RoundAgreement | None,
    *,
    sim: Simulation[Any] | None,
    overwrite: bool,
    build: Callable[[RunConfig], Simulation[Any]] | None,
) -> _RunState:
    """Check the folder, build the simulation, then evaluate round 0 or restore the checkpoint."""
    t0 = time.perf_counter()
    rank, world = rank_and_world()
    fresh = out_dir is not None and resume_from is None
    folder = Path(out_dir) if out_dir is not None and rank == 0 else None  # the run folder's writer
    if fresh and folder is not None:
        check_out_dir(folder, overwrite)
    reset_peak_memory(config.device)  # peaks of this run, also when runs share a process
    if sim is None:
        if build is None and config.topology != "none":
            raise ConfigError(
                f"config key 'topology' = {config.topology} is built by sheaf_fmtl.scenarios: run it with "
                "`sheaf-fmtl run` or sheaf_fmtl.run(...)"
            )
        sim = (build or build_simulation)(config)
        config = sim.config  # as it runs (a special case forces eta = 0, ...): what config.yaml records
    elif config.maps == "auto" or config.lam is None:
        config = sim.config  # a simulation built from config: maps = auto and lam = null as it resolved them
    fed = sim.ctx.fed
    metric_name = fed.metric_name
    if fresh and folder is not None:
        prepare_out_dir(folder, overwrite)
    counter, comm = SampleCounter(fed), sim.ctx.comm

    def agree(failed: bool) -> bool:  # across processes: did any rank fail to write its shard?
        return bool(comm.all_max(torch.tensor(int(failed), dtype=torch.int32)))

    writer = CheckpointWriter(out_dir, rank, world, agree)
    agreement = agreement if agreement is not None else RoundAgreement(sim)
    agreement.writing = lambda: writer.busy
    if world > 1 and out_dir is not None:  # which ranks write into this rank's --out (own disks?)
        writer.ranks = folder_ranks(Path(out_dir), comm, rank, world)
        if fresh:
            adopt_folder(
                Path(out_dir), config_with_clients(config, fed), overwrite, writer.rank, writer.leads, agree
            )
        elif resume_from is not None:
            resume_from = common_checkpoint(resume_from, Path(out_dir), comm)
    if resume_from is None:
        if fresh and folder is not None:
            preprocessing.write(folder, fed.dataset)  # what sheaf_fmtl.load applies to raw data
        if rank == 0 and (unused := unused_warning(config)):  # any source: --set, a file, Python keywords
            warn(unused, UnusedKeysWarning)
        recorder = Recorder(folder, config_with_clients(config, fed), metric_name)
        state = _RunState(config, sim, folder, recorder, counter, writer, agreement, t0, 0, {})
        state.last = _record(sim, recorder, 0, t0)
        state.warn()
        return state
    return _restored(config, sim, folder, counter, writer, agreement, t0, resume_from)


def _restored(
    config: RunConfig,
    sim: Simulation[Any],
    folder: Path | None,
    counter: SampleCounter,
    writer: CheckpointWriter,
    agreement: RoundAgreement,
    t0: float,
    resume_from: Path,
) -> _RunState:
    """The state of a resumed run: the checkpoint ``resume_from`` restored into ``sim``."""
    rank, world = rank_and_world()
    fed = sim.ctx.fed
    metric_name = fed.metric_name
    sim.diagnose()  # start-up notes: given by the stopped run, saved in its checkpoint
    manifest, shard = read_checkpoint(resume_from, rank)
    if len(manifest["shards"]) != world:
        raise ConfigError(
            f"{resume_from} was written by {len(manifest['shards'])} process(es); resume it with as many"
        )
    if folder is not None:  # (data_dir may change: to where the same data lie)
        preprocessing.check_same(folder, fed.dataset)
    restore(sim, counter, shard)
    recorder = Recorder(folder, config_with_clients(config, fed), metric_name, rows=manifest["rows"])
    if folder is not None:
        (folder / "summary.json").unlink(missing_ok=True)
    t0 -= float(manifest["wall_seconds"])
    state = _RunState(
        config, sim, folder, recorder, counter, writer, agreement, t0, int(manifest["round"]), {}
    )
    state.last, state.notes = manifest["last"], manifest["notes"]
    sim.maps_chosen = manifest.get("maps_auto", sim.maps_chosen)  # maps = auto: the stopped run's choice
    sim.lam_rule = manifest.get("lam_rule", sim.lam_rule)
    return state


def _loop(state: _RunState, show: bool, hooks: Hooks) -> _Ending:
    """Rounds ``start + 1 .. rounds``: evaluations, callbacks, checkpoints, and the stop on divergence,
    a signal or a callback's request."""
    config, sim, recorder, writer = state.config, state.sim, state.recorder, state.writer
    view = RunView(sim, state.folder, rank_and_world()[0]) if hooks else None
    every = config.eval_every if config.checkpoint_every < 0 else config.checkpoint_every
    bar = progress.bar(
        range(state.start + 1, config.rounds + 1),
        desc=f"{config.algorithm} on {config.dataset}",
        unit="round",
        initial=state.start,
        total=config.rounds,
        enabled=show,
    )
    ending, metric_name = _Ending(done=state.start), sim.ctx.fed.metric_name
    if view is not None and state.start == 0 and recorder.rows:  # round 0: the initial models
        hooks.round_end(0, recorder.rows[0], view)  # (a stop request counts from round 1)
    try:
        with StopRequest() as stop:
            for k in bar:
                sim.step()
                if not state.agreement.finite():
                    ending.diverged_at = k
                    break
                if writer.pending and state.agreement.settled_round == k:  # every rank's shard is written
                    writer.complete()
                ending.done = k
                due = k % config.eval_every == 0 or k == config.rounds
                regular, rows = state.last, len(recorder.rows)  # what the checkpoint holds if stopped now
                if due:
                    state.last = _record(sim, recorder, k, state.t0)
                    state.warn()  # (diagnose updates the state: not on an evaluation only a stop asks for)
                    regular, rows = state.last, len(recorder.rows)
                    if not math.isfinite(state.last["objective"]):
                        ending.diverged_at = k
                        break
                    bar.set_postfix({metric_name: f"{state.last['test_metric']:.4f}"})
                if view is not None:
                    ending.stopped_by = agreed(
                        sim, hooks.round_end(k, recorder.rows[-1] if due else None, view)
                    )
                requested = stop.requested or ending.stopped_by is not None
                if requested and not due:  # the summary's numbers are this round's
                    state.last = _record(sim, recorder, k, state.t0)
                    if not math.isfinite(state.last["objective"]):
                        ending.diverged_at = k
                        break
                if requested:
                    state.save(k, regular, rows, wait=True)
                    break
                if every > 0 and k % every == 0 and k < config.rounds:
                    state.save(k, state.last, len(recorder.rows), wait=False)
        writer.complete()
    finally:
        bar.close()
    if ending.diverged_at is None and ending.stopped_by is None and stop.requested:
        ending.signum = stop.signum or 0
    return ending


def _finish(state: _RunState, ending: _Ending, *, resumed: bool) -> RunOutcome:
    """The summary, and the final checkpoint (or, for a diverged run, :class:`DivergenceError`)."""
    config, sim, recorder, diverged_at = state.config, state.sim, state.recorder, ending.diverged_at
    status = "diverged" if diverged_at is not None else "interrupted" if ending.signum is not None else "ok"
    if status == "ok" and ending.stopped_by is not None:
        status = "stopped"  # by a callback: resumable like an interrupted run
    summary = summarize(
        sim, config, state.counter, status, state.last, diverged_at, ending.done, state.t0, state.notes
    )
    if status == "interrupted":
        summary.update(rounds_done=ending.done, signal=signal.Signals(ending.signum or 0).name)
    if status == "stopped" and ending.stopped_by is not None:
        summary.update(
            rounds_done=ending.done, stopped_by=ending.stopped_by[0], stop_reason=ending.stopped_by[1]
        )
    if resumed:
        summary["resumed_from_round"] = state.start
    if diverged_at is not None:
        summary["diverged_at_round"] = diverged_at
        summary["last_good_round"] = recorder.rows[-1]["round"] if recorder.rows else None
        late = sim.diagnose()  # e.g. Theorem 1's map-step bound, from the norms seen before the NaN
        state.notes.extend(late)
        summary["message"] = "; ".join([divergence_message(diverged_at, config), *late])
        recorder.summary(summary)
        raise DivergenceError(summary["message"])
    final = final_state(sim)
    digest = recorder.checkpoint(final)
    if digest is not None:  # what a reader of checkpoint.pt checks it against
        summary["checkpoint"] = digest
    recorder.summary(summary)
    if status == "ok" and state.writer.dir is not None and state.writer.leads:
        remove_checkpoints(state.writer.dir)  # checkpoint.pt (rank 0's folder) holds the final state
    return RunOutcome(summary, recorder.rows, final, recorder.config)


def _record(sim: Simulation[Any], recorder: Recorder, k: int, t0: float) -> dict[str, Any]:
    ev = sim.evaluate()
    row = {
        "round": k,
        **{key: ev[key] for key in ("test_metric", "train_loss", "objective", "sheaf_energy")},
        "transmitted_bits": sim.transmitted_bits(),
        **sim.fault_counts(),
        "wall_seconds": time.perf_counter() - t0,
    }
    if math.isfinite(ev["objective"]):
        recorder.log(row)
    return ev
