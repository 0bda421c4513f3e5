"""The round loop of a run (:func:`execute`): rounds, evaluations, checkpoints, the stop on a
signal, divergence, and the run folder's summary; in one process or as one rank of several.

Across processes every rank runs this loop over its shard (:mod:`.launch`); every decision that
ends or records a round (divergence, a stop by a signal, an evaluation) is taken from all-reduced
numbers, so all ranks take it at the same round. Rank 0 writes the run folder; every rank writes
its shard of each checkpoint (:class:`.checkpoint.CheckpointWriter`).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..config import ConfigError, RunConfig
from ..federation import Federation
from ..metrics.flops import SampleCounter
from ..metrics.memory import peak_memory, reset_peak_memory
from ..metrics.recorder import Recorder, software_versions
from .checkpoint import (
    CheckpointWriter,
    rank_and_world,
    read_checkpoint,
    remove_checkpoints,
    restore,
    snapshot,
)
from .gather import final_state
from .interrupt import StopRequest
from .rundir import check_out_dir, prepare_out_dir
from .simulate import DivergenceError, Simulation, build_simulation


def divergence_message(round_: int, config: RunConfig) -> str:
    return (
        f"the loss became NaN or infinite at round {round_}; try smaller step sizes "
        f"(alpha={config.alpha}, eta={config.eta}): Theorem 1 asks alpha < 2/(N L) and eta < 2/(lambda D^2)"
    )


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
) -> RunOutcome:
    """Run ``config`` (into the run folder ``out_dir``, or in memory when ``None``).

    Args:
        config: the run's settings.
        out_dir: a new or empty folder (a non-empty one only with ``overwrite``, which clears it
            once the run has been built); checked before any work. Across processes every rank
            is given it: rank 0 writes the run folder, every rank its checkpoint shards.
        progress: show a progress bar.
        sim: a simulation built elsewhere from ``config`` (e.g. with hand-made maps,
            :mod:`sheaf_fmtl.scenarios`, or one rank's shard, :mod:`.launch`).
        overwrite: accept and clear a non-empty ``out_dir``.
        build: builds the simulation from ``config`` after the folder check (default
            :func:`.simulate.build_simulation`; :func:`sheaf_fmtl.scenarios.build` also builds the
            special cases named by ``topology``, which sit above this layer).
        resume_from: a complete checkpoint folder of ``out_dir`` (:mod:`.checkpoint`): continue
            the stopped run of ``out_dir`` from it (see :func:`sheaf_fmtl.runtime.resume.resume`);
            across processes each rank reads its own shard.
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
    fed = sim.ctx.fed
    metric_name = fed.metric_name
    if fresh and folder is not None:
        prepare_out_dir(folder, overwrite)
    notes: list[str] = []

    def warn() -> None:
        for note in sim.diagnose():
            notes.append(note)
            tqdm.write(f"sheaf-fmtl: warning: {note}")

    counter = SampleCounter(fed)  # samples behind every local gradient, for flops_local
    if resume_from is None:
        recorder = Recorder(folder, _resolved(config, fed), metric_name)
        last, start = _record(sim, recorder, 0, t0), 0
        warn()
    else:
        sim.diagnose()  # start-up notes: given by the stopped run, saved in its checkpoint
        manifest, shard = read_checkpoint(resume_from, rank)
        if len(manifest["shards"]) != world:
            raise ConfigError(
                f"{resume_from} was written by {len(manifest['shards'])} process(es); resume it with as many"
            )
        restore(sim, counter, shard)
        last, start, notes[:] = manifest["last"], int(manifest["round"]), manifest["notes"]
        t0 -= float(manifest["wall_seconds"])
        recorder = Recorder(folder, _resolved(config, fed), metric_name, rows=manifest["rows"])
        if folder is not None:
            (folder / "summary.json").unlink(missing_ok=True)

    def agree(failed: bool) -> bool:  # across processes: did any rank fail to write its shard?
        return bool(sim.ctx.comm.all_max(torch.tensor(int(failed), dtype=torch.int32)))

    writer = CheckpointWriter(out_dir, rank, world, agree)
    sim.writing = lambda: writer.busy
    every = config.eval_every if config.checkpoint_every < 0 else config.checkpoint_every

    def save(k: int, last: dict[str, Any], rows: int, wait: bool) -> None:
        """Checkpoint round ``k``, with the evaluations an uninterrupted run has by then."""
        elapsed = time.perf_counter() - t0
        manifest = {"rows": recorder.rows[:rows], "last": last, "notes": list(notes), "wall_seconds": elapsed}
        writer.save(k, snapshot(sim, counter, guard=writer.join), manifest, wait=wait)

    bar = tqdm(
        range(start + 1, config.rounds + 1),
        desc=f"{config.algorithm} on {config.dataset}",
        unit="round",
        initial=start,
        total=config.rounds,
        disable=not progress,
        dynamic_ncols=True,
    )
    diverged_at, done = None, start
    try:
        with StopRequest() as stop:
            for k in bar:
                sim.step()
                if not sim.finite():
                    diverged_at = k
                    break
                if writer.pending and sim.settled_round == k:  # every rank's shard is written
                    writer.complete()
                done = k
                due = k % config.eval_every == 0 or k == config.rounds
                regular, rows = last, len(recorder.rows)  # what the checkpoint holds if stopped now
                if due or stop.requested:
                    last = _record(sim, recorder, k, t0)
                    if due:  # (diagnose updates the state: not on an evaluation only the stop asked for)
                        warn()
                        regular, rows = last, len(recorder.rows)
                    if not math.isfinite(last["objective"]):
                        diverged_at = k
                        break
                    bar.set_postfix({metric_name: f"{last['test_metric']:.4f}"})
                if stop.requested:
                    save(k, regular, rows, wait=True)
                    break
                if every > 0 and k % every == 0 and k < config.rounds:
                    save(k, last, len(recorder.rows), wait=False)
        writer.complete()
    finally:
        counter.detach()
        bar.close()
        recorder.close()
    status = "diverged" if diverged_at is not None else "interrupted" if stop.requested else "ok"
    summary = _summary(sim, config, counter, status, last, diverged_at, done, t0, notes)
    if status == "interrupted":
        summary.update(rounds_done=done, signal=signal.Signals(stop.signum or 0).name)
    if resume_from is not None:
        summary["resumed_from_round"] = start
    if diverged_at is not None:
        summary["diverged_at_round"] = diverged_at
        summary["last_good_round"] = recorder.rows[-1]["round"] if recorder.rows else None
        late = sim.diagnose()  # e.g. Theorem 1's map-step bound, from the norms seen before the NaN
        notes.extend(late)
        summary["message"] = "; ".join([divergence_message(diverged_at, config), *late])
        recorder.summary(summary)
        raise DivergenceError(summary["message"])
    final = final_state(sim)
    recorder.checkpoint(final)
    recorder.summary(summary)
    if status == "ok" and folder is not None:
        remove_checkpoints(folder)  # checkpoint.pt holds the final state
    return RunOutcome(summary, recorder.rows, final, recorder.config)


def _summary(
    sim: Simulation[Any],
    config: RunConfig,
    counter: SampleCounter,
    status: str,
    last: dict[str, Any],
    diverged_at: int | None,
    done: int,
    t0: float,
    notes: list[str],
) -> dict[str, Any]:
    """``summary.json``'s fields common to every status (collectives across processes)."""
    fed = sim.ctx.fed
    summary: dict[str, Any] = {
        "algorithm": config.algorithm,
        "dataset": config.dataset,
        "num_clients": fed.num_clients,
        "rounds": config.rounds,
        "seed": config.seed,
        "metric": fed.metric_name,
        "status": status,
        "final": last["test_metric"] if diverged_at is None else None,
        "per_client": last["per_client"] if diverged_at is None else None,
        "transmitted_bits": sim.transmitted_bits(),
        **sim.fault_counts(),  # rejected_messages, dropped_messages (runtime/faults.py)
        "wall_seconds": time.perf_counter() - t0,
        **peak_memory(config.device),
        **sim.flops(counter.samples(), diverged_at or done),
        "evaluated_on": "validation" if config.validation > 0 else "test",
        "num_edges": sim.ctx.graph.num_edges,
        "model_dims": sorted({int(d) for d in fed.node_dims()}),
        "warnings": notes,
        "versions": software_versions(),
    }
    lambda_max = getattr(sim.state, "lambda_max", None)
    if lambda_max is not None:
        summary["laplacian_lambda_max"] = lambda_max
    kept = getattr(sim.state, "coupling_state_bytes", None)  # e.g. neighbour estimates (maps=redrawn)
    if kept is not None:
        summary["coupling_state_bytes"] = int(sim.ctx.comm.all_sum(torch.tensor(kept, dtype=torch.int64)))
    return summary


def _resolved(config: RunConfig, fed: Federation) -> RunConfig:
    """``config`` as run: ``clients`` = the number of clients with training data (the dataset's
    own number when the config left it open; a data-less server node is not counted)."""
    if config.clients is not None:
        return config
    sizes = fed.train_sizes if fed.train_sizes is not None else [len(c.y_train) for c in fed.dataset.clients]
    with_data = sum(int(n) > 0 for n in sizes)  # also clients held elsewhere
    return config.replace(clients=with_data) if with_data >= 2 else config


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
