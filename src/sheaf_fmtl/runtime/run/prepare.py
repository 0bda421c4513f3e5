"""Preparing a run for the round loop (:mod:`.loop`): check the run folder, build the simulation,
then evaluate round 0 (a new run) or restore a checkpoint (a resumed one), into the state the
loop's phases share (:class:`RunState`); and recording an evaluation (:func:`record`). Across
processes every rank prepares its shard, and the ranks agree which folders they write and which
checkpoint they resume from in the same order of collectives."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ... import progress
from ...config import ConfigError, RunConfig
from ...config.usage import UnusedKeysWarning, unused_warning
from ...data import preprocessing
from ...data.base import FederatedDataset
from ...metrics.flops import SampleCounter
from ...metrics.memory import reset_peak_memory
from ...warn import warn
from ..engine.simulate import Simulation, build_simulation
from .checkpoints.checkpoint import CheckpointWriter, rank_and_world
from .checkpoints.checkpoint_read import read_checkpoint
from .checkpoints.shard import restore, snapshot
from .disks import adopt_folder, check_preprocessing, common_checkpoint, folder_ranks, write_preprocessing
from .folder.clearing import prepare_out_dir
from .folder.recorder import Recorder
from .folder.rundir import check_out_dir
from .scoring.summary import config_with_clients
from .stopping.agreement import RoundAgreement


@dataclass
class RunState:
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


def prepare(
    config: RunConfig,
    out_dir: str | Path | None,
    resume_from: Path | None,
    agreement: RoundAgreement | None,
    *,
    sim: Simulation[Any] | None,
    overwrite: bool,
    build: Callable[[RunConfig], Simulation[Any]] | None,
) -> RunState:
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
                f"config key 'topology' = {config.topology} is a special case that `sheaf-fmtl run` and "
                "sheaf_fmtl.run(...) build (with its fixed maps); run it through one of them"
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
        if fresh:
            _write_preprocessing(out_dir, folder, fed.dataset, comm, writer)
        if rank == 0 and (unused := unused_warning(config)):  # any source: --set, a file, Python keywords
            warn(unused, UnusedKeysWarning)
        recorder = Recorder(folder, config_with_clients(config, fed), metric_name)
        state = RunState(config, sim, folder, recorder, counter, writer, agreement, t0, 0, {})
        state.last = record(sim, recorder, 0, t0)
        state.warn()
        return state
    return _restored(config, sim, folder, counter, writer, agreement, t0, resume_from)


def _write_preprocessing(
    out_dir: str | Path | None,
    folder: Path | None,
    dataset: FederatedDataset,
    comm: Any,  # noqa: ANN401 - the transport
    writer: CheckpointWriter,
) -> None:
    """What :func:`sheaf_fmtl.load` applies to raw data: in one process the run folder's record;
    across processes every folder's, of the clients its ranks read (:func:`.disks.write_preprocessing`)."""
    if writer.world > 1 and out_dir is not None:
        write_preprocessing(Path(out_dir), dataset, comm, writer.rank, writer.ranks)
    elif folder is not None:
        preprocessing.write(folder, dataset)


def _restored(
    config: RunConfig,
    sim: Simulation[Any],
    folder: Path | None,
    counter: SampleCounter,
    writer: CheckpointWriter,
    agreement: RoundAgreement,
    t0: float,
    resume_from: Path,
) -> RunState:
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
    if world > 1 and writer.dir is not None:  # every rank its clients (data_dir may change: same data)
        check_preprocessing(writer.dir, fed.dataset, sim.ctx.comm)
    elif folder is not None:
        preprocessing.check_same(folder, fed.dataset)
    restore(sim, counter, shard)
    recorder = Recorder(folder, config_with_clients(config, fed), metric_name, rows=manifest["rows"])
    if folder is not None:
        (folder / "summary.json").unlink(missing_ok=True)
    t0 -= float(manifest["wall_seconds"])
    state = RunState(
        config, sim, folder, recorder, counter, writer, agreement, t0, int(manifest["round"]), {}
    )
    state.last, state.notes = manifest["last"], manifest["notes"]
    sim.maps_chosen = manifest.get("maps_auto", sim.maps_chosen)  # maps = auto: the stopped run's choice
    sim.lam_rule = manifest.get("lam_rule", sim.lam_rule)
    return state


def record(sim: Simulation[Any], recorder: Recorder, k: int, t0: float) -> dict[str, Any]:
    ev = sim.evaluate()
    row = {
        "round": k,
        **{key: ev[key] for key in ("test_metric", "train_loss", "objective", "sheaf_energy")},
        "transmitted_bits": sim.transmitted_bits(),
        **sim.fault_counts(),
        "wall_seconds": time.perf_counter() - t0,
        "clients_present": ev["clients_present"],
    }
    if math.isfinite(ev["objective"]):
        recorder.log(row)
    return ev
