"""Build a run from a config and drive the rounds: all clients stacked in one process, or one
rank's shard of them (:mod:`.shard`, :mod:`.distributed`, launched by :mod:`.launch`)."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from ..algorithms import Algorithm, Context, State, make_algorithm
from ..algorithms.server import ServerAlgorithm
from ..algorithms.sheaf_fmtl import SheafState
from ..config import ConfigError, RunConfig
from ..data.base import FederatedDataset
from ..data.protocol import ProtocolOptions
from ..data.registry import DataRequest, load
from ..federation import Federation, build_federation
from ..metrics.flops import SampleCounter, run_flops
from ..metrics.memory import peak_memory, reset_peak_memory
from ..metrics.recorder import Recorder, software_versions
from ..sheaf.graph import ClientGraph, make_graph
from .checkpoint import (
    CheckpointWriter,
    process_count,
    read_checkpoint,
    remove_checkpoints,
    restore,
    snapshot,
)
from .faults import DropPlan, Faults
from .interrupt import StopRequest, adopt, signalled
from .rundir import check_out_dir, prepare_out_dir
from .transport import InProcessTransport, Transport

S = TypeVar("S", bound=State)


class DivergenceError(RuntimeError):
    """The loss or the parameters became NaN or infinite."""


@dataclass(eq=False)
class Simulation(Generic[S]):
    """A run, or one rank's shard of it: the algorithm, its state, the context it sees and the
    transport. Read it through :meth:`theta` and :meth:`maps` (client order, whatever the stacking;
    a shard answers for its own clients and half-edges). Quantities over all clients (evaluation
    means, bits, FLOPs, fault counts, the divergence check) are summed through ``ctx.comm``."""

    config: RunConfig
    ctx: Context
    algorithm: Algorithm[S]
    state: S
    transport: Transport
    stop_agreed: tuple[int, int] | None = None  # (round, signal or 0) agreed across processes

    def theta(self, i: int) -> torch.Tensor:
        """Client ``i``'s flat parameter vector ``theta_i [d_i]`` (a view into the stacked state)."""
        fed = self.ctx.fed
        return self.state.thetas[int(fed.cohort_of[i])][int(fed.position[i])]

    def maps(self) -> dict[tuple[int, int], torch.Tensor]:
        """The restriction maps ``{(i, j): P_ij [d_ij, d_i]}``, one per half-edge ``i -> j`` (views
        into the stacked maps, pending rank-one updates folded in); empty for algorithms without
        maps. The stacked form is ``state.maps`` per bucket of ``state.layout``."""
        state = self.state
        if not isinstance(state, SheafState) or state.layout is None:
            return {}
        g, out = self.ctx.graph, {}
        for b, m in zip(state.layout.buckets, state.maps, strict=True):
            for k, h in enumerate(b.half_edges.tolist()):
                out[(int(g.src[h]), int(g.dst[h]))] = m[k]
        return out

    def step(self) -> None:
        """One synchronous round: local -> (send -> exchange -> receive) per phase; the clients that
        sit the round out (``drop_prob``) keep their state (:mod:`sheaf_fmtl.runtime.faults`)."""
        alg, ctx, faults = self.algorithm, self.ctx, self.transport.faults
        faults.begin_round()
        before = faults.snapshot(self.state)
        self.state = alg.local(self.state, ctx)
        for phase in range(alg.phases(self.state)):
            incoming = self.transport.exchange(alg.send(self.state, phase, ctx))
            self.state = alg.receive(self.state, incoming, phase, ctx)
        faults.hold(self.state, before, [c.clients for c in ctx.fed.cohorts])

    def finite(self) -> bool:
        """Every theta and the last batch losses are finite, on every process (one host-device
        sync a round; one small all-reduce across processes)."""
        flags = [torch.isfinite(t).all() for t in self.state.thetas]
        if self.state.batch_loss is not None:
            flags.append(torch.isfinite(self.state.batch_loss).all())
        bad = (~torch.stack(flags).all()).to(torch.int32)
        if isinstance(self.transport, InProcessTransport):
            return not bool(bad)
        both = self.ctx.comm.all_max(torch.stack([bad, torch.tensor(signalled(), dtype=torch.int32)]))
        self.stop_agreed = (self.transport.faults.round, int(both[1]))  # read by agree_stop
        return not bool(both[0])

    def agree_stop(self, local: bool) -> bool:
        """Across processes: whether the group stops after this round: a signal on any rank, as
        gathered by this round's :meth:`finite` (else one all-reduce); a rank that got none adopts
        it (:func:`.interrupt.adopt`), so every rank records the same stop."""
        if self.stop_agreed is None or self.stop_agreed[0] != self.transport.faults.round:
            got = self.ctx.comm.all_max(torch.tensor(signalled(), dtype=torch.int32))
            self.stop_agreed = (self.transport.faults.round, int(got))
        signum = self.stop_agreed[1]
        if signum:
            adopt(signum)
        return signum > 0

    def transmitted_bits(self) -> int:
        """Bits every process's transport has carried so far (the same total in every runtime)."""
        bits = torch.tensor(self.transport.bits, dtype=torch.int64)
        return int(self.ctx.comm.all_sum(bits))

    def fault_counts(self) -> dict[str, int]:
        """``rejected_messages`` and ``dropped_messages`` so far, over every process."""
        counts = self.transport.faults.counts()
        total = self.ctx.comm.all_sum(torch.tensor(list(counts.values()), dtype=torch.int64)).tolist()
        return dict(zip(counts, (int(v) for v in total), strict=True))

    def flops(self, samples: list[int], rounds: int) -> dict[str, int]:
        """The summary's FLOP fields (:func:`sheaf_fmtl.metrics.flops.run_flops`), summed over every
        process's clients and half-edges (graph-wide aggregation terms are counted once)."""
        out = run_flops(self.config, self.ctx.fed, self.ctx.graph, self.state, samples, rounds)
        keys = ("flops_local", "flops_sheaf")
        summed = self.ctx.comm.all_sum(torch.tensor([out[k] for k in keys], dtype=torch.int64)).tolist()
        out.update(zip(keys, (int(v) for v in summed), strict=True))
        out["flops"] = out["flops_local"] + out["flops_sheaf"] + out["flops_aggregation"]
        return out

    def diagnose(self) -> list[str]:
        """Warnings the algorithm has for the user now (step-size conditions), each given once."""
        return list(self.algorithm.diagnose(self.state, self.ctx))

    def evaluate(self) -> dict[str, Any]:
        """Test metric per client and its mean over the clients that have test data (a data-less
        server node of the special cases is left out of the mean and reported as ``None``).
        ``train_loss`` and ``objective`` use a fixed random subsample of each client's training data
        (:data:`sheaf_fmtl.federation.EVAL_TRAIN_SAMPLES`), so an evaluation costs about a round."""
        fed, comm = self.ctx.fed, self.ctx.comm
        pairs = list(zip(fed.cohorts, self.state.thetas, strict=True))
        with torch.no_grad():  # [N] each, zero for clients held elsewhere, then summed over processes
            metric = comm.all_sum(fed.per_client([c.test_metric(t) for c, t in pairs]))
            f = comm.all_sum(fed.per_client([c.train_loss(t) for c, t in pairs]))
            tested = comm.all_sum(fed.per_client([(c.n_test > 0).float() for c, _ in pairs])) > 0
        pen = self.algorithm.penalty(self.state, self.ctx)
        return {
            "per_client": [
                float(v) if ok else None for v, ok in zip(metric.tolist(), tested.tolist(), strict=True)
            ],
            "test_metric": float(metric[tested].mean()),
            "train_loss": float(f.mean()),
            "objective": float(f.sum()) + (pen[0] if pen else 0.0),
            "sheaf_energy": pen[1] if pen else None,
        }


def load_dataset(config: RunConfig) -> FederatedDataset:
    request = DataRequest(
        clients=config.clients,
        seed=config.seed,
        data_dir=Path(config.data_dir) if config.data_dir else None,
        options=config.data,
    )
    protocol = ProtocolOptions(standardize=config.standardize, validation=config.validation)
    return load(config.dataset, request, protocol)


def build_graph(config: RunConfig, num_clients: int) -> ClientGraph:
    return make_graph(
        config.graph,
        num_clients,
        p=config.graph_p,
        k=config.graph_k,
        m=config.graph_m,
        seed=config.seed,
        path=config.graph_file or None,
    )


def resolve_device(name: str) -> str:
    """``name`` (``cpu``, ``cuda`` or ``cuda:N``) if that device is present; ValueError otherwise."""
    if not name.startswith("cuda"):
        return name
    if not torch.cuda.is_available():
        raise ValueError(f"device {name}: no CUDA device is available here; use device=cpu")
    index = int(name.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {name}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0..)")
    return name


def build_simulation(
    config: RunConfig,
    fed: Federation | None = None,
    graph: ClientGraph | None = None,
    *,
    rank_world: tuple[int, int] | None = None,
    dataset: FederatedDataset | None = None,
) -> Simulation[Any]:
    """Everything a run needs, from the config alone (data, federation, graph, algorithm, state).

    ``rank_world = (rank, K)`` with ``K > 1``: this process is one rank of a process group (joined
    already, :mod:`.launch`); it builds only the clients of its shard (:mod:`.shard`, the
    ``partition`` key), their data and maps, and exchanges through :mod:`.distributed`. ``dataset``:
    the data to use instead of the config's (e.g. a benchmark's generated one)."""
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    if dataset is None:
        dataset = fed.dataset if fed is not None else load_dataset(config)
    if graph is None:
        graph = build_graph(config, dataset.num_clients)
    faults = Faults(DropPlan.from_config(config), graph)
    transport: Transport = InProcessTransport(faults)
    if rank_world is not None and rank_world[1] > 1:
        from .distributed import DistributedTransport
        from .shard import Shard, partition

        if config.topology != "none" or config.map_draw == "device":
            key = "topology" if config.topology != "none" else "map_draw=device"
            raise ConfigError(f"config key {key} is not supported across processes; use processes=1")
        rank, world = rank_world
        shard = Shard(rank, world, partition(graph, world, config.partition, config.seed))
        fed = build_federation(
            dataset, config.model, l2=config.l2, device=device, clients=shard.clients.tolist()
        )
        transport = DistributedTransport(shard, graph, faults)
    elif fed is None:
        fed = build_federation(dataset, config.model, l2=config.l2, device=device)
    if graph.num_nodes != fed.num_clients:
        raise ValueError(
            f"graph has {graph.num_nodes} nodes but the federation has {fed.num_clients} clients"
        )
    init_gen = torch.Generator().manual_seed(_derive(config.seed, 1))
    fed = fed.with_streams(config.seed)  # each client's own mini-batch stream (sheaf_fmtl.streams)
    ctx = Context(fed, graph, config, init_gen)
    if not isinstance(transport, InProcessTransport):
        ctx.comm = transport  # type: ignore[assignment]  # DistributedTransport is a Comm
    algorithm = make_algorithm(config)
    if config.drop_prob > 0 and not isinstance(transport, InProcessTransport) and not ctx.fed.held.all():
        if isinstance(algorithm, ServerAlgorithm):  # Faults.server_rows reads every client's row
            raise ConfigError("drop_prob with a server baseline is not supported across processes yet")
    return Simulation(config, ctx, algorithm, algorithm.init(ctx), transport)


def _derive(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


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
            once the run has been built); checked before any work.
        progress: show a progress bar.
        sim: a simulation built elsewhere from ``config`` (e.g. with hand-made maps,
            :mod:`sheaf_fmtl.scenarios`).
        overwrite: accept and clear a non-empty ``out_dir``.
        build: builds the simulation from ``config`` after the folder check (default
            :func:`build_simulation`; :func:`sheaf_fmtl.scenarios.build` also builds the special
            cases named by ``topology``, which sit above this layer).
        resume_from: a complete checkpoint folder of ``out_dir`` (:mod:`.checkpoint`): continue
            the stopped run of ``out_dir`` from it (see :func:`sheaf_fmtl.runtime.resume.resume`).
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
    fresh = out_dir is not None and resume_from is None
    if fresh:
        check_out_dir(out_dir, overwrite)  # type: ignore[arg-type]  # not None: fresh
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
    metric_name = "accuracy" if fed.task == "classification" else "mse"
    if fresh:
        prepare_out_dir(out_dir, overwrite)  # type: ignore[arg-type]
    notes: list[str] = []

    def warn() -> None:
        for note in sim.diagnose():
            notes.append(note)
            tqdm.write(f"sheaf-fmtl: warning: {note}")

    counter = SampleCounter(fed)  # samples behind every local gradient, for flops_local
    if resume_from is None:
        recorder = Recorder(out_dir, _resolved(config, fed), metric_name)
        last, start = _record(sim, recorder, 0, t0), 0
        warn()
    else:
        sim.diagnose()  # start-up notes: given by the stopped run, saved in its checkpoint
        manifest, shard = read_checkpoint(resume_from)
        restore(sim, counter, shard)
        last, start, notes[:] = manifest["last"], int(manifest["round"]), manifest["notes"]
        t0 -= float(manifest["wall_seconds"])
        recorder = Recorder(out_dir, _resolved(config, fed), metric_name, rows=manifest["rows"])
        (Path(out_dir) / "summary.json").unlink(missing_ok=True)  # type: ignore[arg-type]
    # Several processes: each would write its shard (write_shard) and one the manifest after a
    # barrier; not wired into the distributed runtime yet, so such runs write no checkpoint.
    writer = CheckpointWriter(out_dir if process_count() == 1 else None)
    every = config.eval_every if config.checkpoint_every < 0 else config.checkpoint_every

    def save(k: int, last: dict[str, Any], rows: int, wait: bool) -> None:
        """Checkpoint round ``k``, with the evaluations an uninterrupted run has by then."""
        elapsed = time.perf_counter() - t0
        manifest = {"rows": recorder.rows[:rows], "last": last, "notes": list(notes), "wall_seconds": elapsed}
        writer.save(k, snapshot(sim, counter, guard=writer.wait), manifest, wait=wait)

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
        writer.wait()
    finally:
        counter.detach()
        bar.close()
        recorder.close()
    status = "diverged" if diverged_at is not None else "interrupted" if stop.requested else "ok"
    summary: dict[str, Any] = {
        "algorithm": config.algorithm,
        "dataset": config.dataset,
        "num_clients": fed.num_clients,
        "rounds": config.rounds,
        "seed": config.seed,
        "metric": metric_name,
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
    if status == "ok" and out_dir is not None:
        remove_checkpoints(Path(out_dir))  # checkpoint.pt holds the final state
    return RunOutcome(summary, recorder.rows, final, recorder.config)


def final_state(sim: Simulation[Any]) -> dict[str, Any]:
    """``checkpoint.pt``'s payload: each client's theta (on the CPU), the edges, and the
    algorithm's own state (Sheaf-FMTL: the maps, or only their norms when ``save_maps=false``).
    Across processes, gathered on rank 0 (:func:`sheaf_fmtl.runtime.gather.gather_final_state`)."""
    fed = sim.ctx.fed
    if not fed.held.all():
        from .gather import gather_final_state

        return gather_final_state(sim)
    return {
        "thetas": [sim.state.thetas[fed.cohort_of[i]][fed.position[i]].cpu() for i in range(fed.num_clients)],
        "edges": torch.as_tensor(sim.ctx.graph.edges),
        **sim.algorithm.checkpoint(sim.state, sim.ctx),
    }


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
