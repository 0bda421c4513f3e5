"""The round loop of a run (:func:`execute`): rounds, evaluations, checkpoints, the stop on a
signal, divergence, and the run folder's summary; in one process or as one rank of several.

Across processes every rank runs this loop over its shard (:mod:`.launching.launch`); every decision that
ends or records a round (divergence, a stop by a signal, an evaluation) is taken from all-reduced
numbers, so all ranks take it at the same round. Rank 0 writes the run folder; every rank writes
its shard of each checkpoint (:class:`.checkpoints.checkpoint.CheckpointWriter`). Callbacks
(:mod:`.callbacks.callbacks`) run after every round; a stop one asks for is agreed the same way.

The phases of a run (prepare: :mod:`.prepare`; rounds; finish) share one state (:class:`.prepare.RunState`);
across processes every rank runs their collectives in the same order.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import progress
from ...config import RunConfig
from ...transforms import TransformError
from ..engine.divergence import divergence_message
from ..engine.simulate import DivergenceError, Simulation
from .callbacks.callbacks import Hooks, RunView, agreed, checked
from .callbacks.shipped_callbacks import best_record, from_config
from .checkpoints.checkpoint import rank_and_world, remove_checkpoints
from .checkpoints.gather import final_state
from .folder.folderlock import writing
from .prepare import RunState, prepare, record
from .scoring.scoring import best_on_test
from .scoring.summary import summarize, vouched
from .stopping.agreement import RoundAgreement
from .stopping.full import disk_full, user_code_failed
from .stopping.interrupt import StopRequest


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
            :mod:`sheaf_fmtl.scenarios`, or one rank's shard, :mod:`.launching.launch`).
        overwrite: accept and clear a non-empty ``out_dir``.
        build: builds the simulation from ``config`` after the folder check (default
            :func:`.simulate.build_simulation`; :func:`sheaf_fmtl.scenarios.build` also builds the
            special cases named by ``topology``, which sit above this layer).
        resume_from: a complete checkpoint folder of ``out_dir`` (:mod:`.checkpoints.checkpoint`):
            continue the stopped run of ``out_dir`` from it (see
            :func:`sheaf_fmtl.runtime.run.launching.resume.resume`); across processes each rank reads
            its own shard.
        callbacks: objects with ``on_round_end(round, metrics, view)`` and/or ``on_run_end(summary)``
            (:mod:`.callbacks.callbacks`), after those the config's keys ask for (``log_tensorboard``,
            ``early_stop_patience``); one that returns a ``Stop`` ends the run after that round with
            a checkpoint, recorded with ``status = stopped`` and ``stopped_by`` (at the last round
            the run ran all its rounds: ``status = ok``, with ``stop_at_last_round``).
        agreement: what the ranks agree after each round, when a launched rank's signal handling
            already holds it (:mod:`.launching.launch`); by default the loop makes its own.
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
    with writing(out_dir):  # a second run of this process into the same folder: refused
        return _execute(config, out_dir, progress, sim, overwrite, build, resume_from, callbacks, agreement)


def _execute(
    config: RunConfig,
    out_dir: str | Path | None,
    progress: bool,
    sim: Simulation[Any] | None,
    overwrite: bool,
    build: Callable[[RunConfig], Simulation[Any]] | None,
    resume_from: Path | None,
    callbacks: Sequence[Any],
    agreement: RoundAgreement | None,
) -> RunOutcome:
    hooks = Hooks([*from_config(config), *checked(callbacks)])
    try:
        state = prepare(config, out_dir, resume_from, agreement, sim=sim, overwrite=overwrite, build=build)
    except OSError as e:  # a full disk as the folder's first files are written: one line too
        raise disk_full(None if out_dir is None else Path(out_dir), [], e) from None
    try:
        return _run(state, progress, hooks, resumed=resume_from is not None)
    except OSError as e:  # a full disk: one line naming the folder and what it kept
        raise disk_full(state.folder, state.recorder.rows, e) from None
    except TransformError as e:  # the user's transform raised: the same, the user's error kept
        raise user_code_failed(state.folder, state.recorder.rows, e) from e.__cause__


def _run(state: RunState, progress: bool, hooks: Hooks, *, resumed: bool) -> RunOutcome:
    """The round loop, the summary and final checkpoint, then the callbacks' ``on_run_end`` (their
    ``on_exception`` when the run ends with an error instead)."""
    view = RunView(state.sim, state.folder, rank_and_world()[0]) if hooks else None
    try:
        try:
            ending = _loop(state, progress, hooks, view)
        finally:
            state.counter.detach()
            state.recorder.close()
        outcome = _finish(state, ending, resumed=resumed, kept=hooks.callbacks)
    except BaseException as e:
        if isinstance(e, Exception):  # the write in flight finished (and its pruning done) before
            state.writer.join()  # the error tells what the folder kept, or a resume could race it
        hooks.exception(e)
        raise
    if view is not None:
        view.final_state = outcome.final
    hooks.run_end(outcome.summary)
    return outcome


@dataclass
class _Ending:
    """How the round loop ended: the last round done, and a divergence or a signal."""

    done: int
    diverged_at: int | None = None
    signum: int | None = None  # the signal that stopped the run
    stopped_by: tuple[str, str] | None = None  # (callback, reason) of a callback's stop request


def _loop(state: RunState, show: bool, hooks: Hooks, view: RunView | None) -> _Ending:
    """Rounds ``start + 1 .. rounds``: evaluations, callbacks, checkpoints, and the stop on divergence,
    a signal or a callback's request."""
    config, sim, recorder, writer = state.config, state.sim, state.recorder, state.writer
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
                    state.last = record(sim, recorder, k, state.t0)
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
                    state.last = record(sim, recorder, k, state.t0)
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


def _finish(state: RunState, ending: _Ending, *, resumed: bool, kept: list[Any]) -> RunOutcome:
    """The summary, and the final checkpoint (or, for a diverged run, :class:`DivergenceError`);
    ``summary.json`` vouches for the files an export reads (``checkpoint``, ``files``, ``best``)."""
    config, sim, recorder, diverged_at = state.config, state.sim, state.recorder, ending.diverged_at
    status = "diverged" if diverged_at is not None else "interrupted" if ending.signum is not None else "ok"
    if status == "ok" and ending.stopped_by is not None and ending.done < config.rounds:
        status = "stopped"  # by a callback: resumable like an interrupted run
    summary = summarize(
        sim, config, state.counter, status, state.last, diverged_at, ending.done, state.t0, state.notes
    )
    if status == "ok" and ending.stopped_by is not None:  # asked at the last round: every round ran
        summary["stop_at_last_round"] = {"by": ending.stopped_by[0], "reason": ending.stopped_by[1]}
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
    summary.update(best_on_test(config, kept, sim.ctx.fed.num_clients))  # validation > 0: on test too
    final = final_state(sim)
    digest = recorder.checkpoint(final)
    if digest is not None:  # what a reader of checkpoint.pt checks it against
        summary.update(
            checkpoint=digest, **vouched(state.recorder.dir), **best_record(kept, state.recorder.dir)
        )
    recorder.summary(summary)
    if status == "ok" and state.writer.dir is not None and state.writer.leads:
        remove_checkpoints(state.writer.dir)  # checkpoint.pt (rank 0's folder) holds the final state
    return RunOutcome(summary, recorder.rows, final, recorder.config)
