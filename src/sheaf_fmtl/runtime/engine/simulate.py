"""A run's simulation and its builders: all clients stacked in one process, or one rank's shard of
them (:mod:`.shard`, :mod:`.distributed`, launched by :mod:`sheaf_fmtl.runtime.run.launching.launch`).
The round loop that drives it (evaluations, checkpoints, stops) is :mod:`sheaf_fmtl.runtime.run.loop`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from ...algorithms import Algorithm, Context, State, make_algorithm
from ...algorithms.maps.auto import coupled_dims as _coupled_dims
from ...algorithms.maps.auto import fallback_note, resolve_coupling
from ...algorithms.maps.learned_state import SheafState
from ...algorithms.training.coupling_strength import negligible_note
from ...algorithms.training.epoch import StaticEpoch, resolve_compile
from ...config import ConfigError, RunConfig
from ...config.rules import check_schedule
from ...data.base import FederatedDataset, PartitionSpec
from ...data.protocol import ProtocolOptions
from ...data.registry import DataRequest, load
from ...data.sizes import check_fits
from ...federation import Cohorts, build_federation
from ...metrics.flops import run_flops
from ...plugins import is_held, resolve
from ...sheaf.graph import ClientGraph, GraphError, make_graph
from ...spelling import setting
from ...transforms import batch_transform
from .faults import DropPlan, Faults
from .participation import Participation
from .schedule import Schedule, schedule_graph
from .silos import read_silo
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
    maps_chosen: str | None = None  # maps = auto: why the mode in config.maps was chosen
    lam_rule: str | None = None  # lam = null: how the default lam that runs was derived
    compiled: bool = (
        False  # the local epochs take the compiled static step (compile, algorithms/training/epoch.py)
    )
    compile_note: str | None = None  # compile = true: why the local epochs run uncompiled

    def theta(self, i: int) -> torch.Tensor:
        """Client ``i``'s flat parameter vector ``theta_i [d_i]`` (a view into the stacked state)."""
        fed = self.ctx.fed
        return self.state.thetas[int(fed.cohort_of[i])][int(fed.position[i])]

    def maps(self) -> dict[tuple[int, int], torch.Tensor]:
        """The restriction maps ``{(i, j): P_ij [d_ij, d_i]}``, one per half-edge ``i -> j`` (views
        into the stacked maps, pending rank-one updates folded in); empty for algorithms without
        maps. The stacked form is ``state.maps`` per bucket of ``state.layout``. On a weighted graph
        the run scales edge ``{i, j}``'s terms by ``a_ij`` on top (maps acting as ``sqrt(a_ij) P_ij``)."""
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
        sit the round out (``drop_prob``, ``clients_per_round``) keep their state and BatchNorm
        statistics (:mod:`.faults`)."""
        alg, ctx, faults = self.algorithm, self.ctx, self.transport.faults
        faults.begin_round()
        ctx.left_out = faults.left_out  # clients_per_round: who is not drawn this round
        before = faults.snapshot(self.state)
        stats = [(c, c.norms.stats) for c in ctx.fed.cohorts if c.norms is not None] if before else []
        self.state = alg.local(self.state, ctx)
        for phase in range(alg.phases(self.state)):
            incoming = self.transport.exchange(alg.send(self.state, phase, ctx))
            self.state = alg.receive(self.state, incoming, phase, ctx)
        faults.hold(self.state, before, [c.clients for c in ctx.fed.cohorts])
        faults.hold_stats(stats)  # (BatchNorm statistics live on the cohorts, not in the state)

    def finite(self) -> bool:
        """Every theta and the last batch losses are finite, on every process (one host-device
        sync a round; across processes one small all-reduce, :meth:`finite_and_max`)."""
        return self.finite_and_max(())[0]

    def finite_and_max(self, carry: Sequence[int]) -> tuple[bool, list[int]]:
        """:meth:`finite`, and the largest of each number of ``carry`` over the processes, carried
        on the same all-reduce (in one process: ``carry`` itself; the run sends a pending signal
        and whether a checkpoint write is in flight, :mod:`sheaf_fmtl.runtime.run.stopping.agreement`)."""
        checked = [*self.state.thetas]
        if self.state.batch_loss is not None:
            checked.append(self.state.batch_loss)
        bad = _non_finite(checked)
        if isinstance(self.transport, InProcessTransport):
            return not bool(bad), list(carry)
        extra = torch.tensor(list(carry), dtype=torch.int32)
        got = self.ctx.comm.all_max(torch.cat([bad.view(1).cpu(), extra]).to(bad.device)).tolist()
        return not bool(got[0]), [int(v) for v in got[1:]]

    def transmitted_bits(self) -> int:
        """Bits every process's transport has carried so far (the same total in every runtime)."""
        bits = torch.tensor(self.transport.bits, dtype=torch.int64)
        return int(self.ctx.comm.all_sum(bits))

    def analytic_bits(self, rounds: int) -> int | None:
        """Bits ``rounds`` rounds send by the algorithm's formula (every message delivered), over
        every process; ``None`` when the algorithm has no formula (``analytic_bits``)."""
        formula = getattr(self.algorithm, "analytic_bits", None)
        if formula is None:
            return None
        bits = torch.tensor(int(formula(self.state, rounds)), dtype=torch.int64)
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
        server node of the special cases is left out of the mean and reported as ``None``) and
        have joined (``join_round``), ``clients_present`` of them.
        ``train_loss`` and ``objective`` use a fixed random subsample of each client's training data
        (:data:`sheaf_fmtl.federation.EVAL_TRAIN_SAMPLES`), so an evaluation costs about a round."""
        fed, comm = self.ctx.fed, self.ctx.comm
        pairs = list(zip(fed.cohorts, self.state.thetas, strict=True))
        with torch.no_grad():  # [N] each, zero for clients held elsewhere, then summed over processes
            metric = comm.all_sum(fed.per_client([c.test_metric(t) for c, t in pairs]))
            f = comm.all_sum(fed.per_client([c.train_loss(t) for c, t in pairs]))
            tested = comm.all_sum(fed.per_client([(c.n_test > 0).float() for c, _ in pairs])) > 0
        faults = self.transport.faults
        present = faults.schedule.present(faults.round) if faults.schedule is not None else None
        if present is not None:  # clients that have not joined yet (join_round): left out
            tested = tested & torch.from_numpy(present).to(tested.device)
            f = f[torch.from_numpy(present).to(f.device)]
        pen = self.algorithm.penalty(self.state, self.ctx)
        return {
            "per_client": [
                float(v) if ok else None for v, ok in zip(metric.tolist(), tested.tolist(), strict=True)
            ],
            "test_metric": float(metric[tested].mean()),
            "clients_present": int(tested.sum()),
            "train_loss": float(f.mean()),
            "objective": float(f.sum()) + (pen[0] if pen else 0.0),
            "sheaf_energy": pen[1] if pen else None,
        }


def _non_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``int32`` scalar, 1 when an element of ``tensors`` is NaN or infinite. On the CPU one sum per
    tensor comes first (read on the host, free there): finite sums mean finite elements, and only a
    sum that is not (a non-finite element, or an overflow of finite ones) takes the elementwise check
    (``isfinite`` is ~50x slower than a sum on the CPU)."""
    if all(t.device.type == "cpu" for t in tensors) and all(math.isfinite(float(t.sum())) for t in tensors):
        return torch.zeros((), dtype=torch.int32)
    flags = [torch.isfinite(t).all() for t in tensors]
    return (~torch.stack(flags).all()).to(torch.int32)


def load_dataset(
    config: RunConfig, split: str | None = None, held: Sequence[int] | None = None
) -> FederatedDataset:
    """The config's dataset, its test split scored (``validation > 0``: the validation split, or with
    ``split = "test"`` the test split, the training data the same). ``held``: only these clients'
    (global ids, ascending; a rank's read, :mod:`.silos`)."""
    request = DataRequest(
        clients=config.clients,
        seed=config.seed,
        data_dir=Path(config.data_dir) if config.data_dir else None,
        data_search=config.data_search,
        options=config.data,
        partition=PartitionSpec.of(config),
        held=None if held is None else tuple(int(i) for i in held),
    )
    protocol = ProtocolOptions(
        standardize=config.standardize, validation=config.validation, keep_test=split == "test"
    )
    dataset = load(config.dataset, request, protocol)
    return dataclasses.replace(dataset, loss=config.loss, metric=config.metric)


def edge_state_bytes(config: RunConfig, dataset: FederatedDataset) -> float:
    """A lower bound of the bytes a run holds per edge: both ends' maps ``[gamma d, d]`` with their
    pending updates (learned maps), else a few model-sized messages and copies; ``d`` the largest
    linear model of the clients' features (a network has more parameters)."""
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    d = max(math.prod(dataset.feature_shape(i)) + 1 for i in range(dataset.num_clients)) * outputs
    learned = config.algorithm == "sheaf-fmtl" and config.maps == "learned"
    return 2 * 4 * (2 * max(1.0, config.gamma * d) * d if learned else 4 * d)


def build_graph(config: RunConfig, num_clients: int, edge_bytes: float = 0.0) -> ClientGraph:
    """The config's graph; a graph handed to :func:`sheaf_fmtl.run` (a placeholder) as given.
    ``edge_bytes``: what the run holds per edge, checked with the graph before it is drawn."""
    if config.graph_schedule == "exponential" or (
        config.graph_schedule == "random-peers" and config.peers_from == "all"
    ):  # every edge a round may use, whatever the graph key says (runtime/engine/schedule.py)
        return schedule_graph(config, num_clients, edge_bytes)
    if is_held(config.graph):
        graph = resolve("graph", config.graph)
        if graph.num_nodes != num_clients:
            raise GraphError(f"the graph has {graph.num_nodes} nodes but the data has {num_clients} clients")
        return graph  # type: ignore[no-any-return]
    return make_graph(
        config.graph,
        num_clients,
        p=config.graph_p,
        degree=config.graph_degree,
        k=config.graph_k,
        m=config.graph_m,
        seed=config.seed,
        path=config.graph_file or None,
        edge_bytes=edge_bytes,
    )


def resolve_device(name: str) -> str:
    """``name`` (``cpu``, ``cuda`` or ``cuda:N``) if that device is present; ValueError otherwise."""
    if not name.startswith("cuda"):
        return name
    if not torch.cuda.is_available():
        raise ValueError(f"device {name}: no CUDA device is available here; use {setting('device', 'cpu')}")
    index = int(name.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise ValueError(f"device {name}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0..)")
    return name


def build_simulation(
    config: RunConfig,
    fed: Cohorts | None = None,
    graph: ClientGraph | None = None,
    *,
    rank_world: tuple[int, int] | None = None,
    dataset: FederatedDataset | None = None,
) -> Simulation[Any]:
    """Everything a run needs, from the config alone (data, federation, graph, algorithm, state).

    ``rank_world = (rank, K)`` with ``K > 1``: this process is one rank of a process group (joined
    already, :mod:`.launch`); it builds only the clients of its shard (:mod:`.shard`, the
    ``placement`` key), their data and maps, and exchanges through :mod:`.distributed`; with
    ``clients`` set it reads only its clients' data (:mod:`.silos`). ``dataset``:
    the data to use instead of the config's (e.g. a benchmark's generated one)."""
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    dataset, graph = _data_and_graph(config, fed, graph, rank_world, dataset)
    participation = Participation.from_config(config, graph.num_nodes)
    faults = Faults(DropPlan.from_config(config), graph, Schedule.from_config(config, graph), participation)
    fed, transport = _federation_here(config, dataset, graph, faults, device, rank_world, fed)
    check_models_fit(fed)
    if graph.num_nodes != fed.num_clients:
        raise ValueError(
            f"graph has {graph.num_nodes} nodes but the federation has {fed.num_clients} clients"
        )
    config, chosen, lam_rule = resolve_coupling(config, fed, graph)  # maps = auto, lam = null: what runs
    check_schedule(config)  # the maps maps = auto chose, with the graph's schedule
    compiled, compile_note = resolve_compile(config, fed)  # compile = null: the device's faster way
    init_gen = torch.Generator().manual_seed(_derive(config.seed, 1))
    fed = fed.with_streams(config.seed)  # each client's own mini-batch stream (sheaf_fmtl.streams)
    ctx = Context(fed, graph, config, init_gen, static_epoch=StaticEpoch() if compiled else None)
    held = [c for cohort in fed.cohorts for c in cohort._client_ids]  # their augmentation streams:
    ctx.transform = batch_transform(config.transform, config.transform_args, config.seed, held)
    if not isinstance(transport, InProcessTransport):
        ctx.comm = transport  # type: ignore[assignment]  # DistributedTransport is a Comm
    algorithm = make_algorithm(config)
    state = algorithm.init(ctx)
    if (note := fallback_note(chosen)) is not None:
        algorithm.notes.append(note)  # type: ignore[attr-defined]  # sheaf-fmtl's (maps = auto)
    weak = negligible_note(config, _coupled_dims(config, fed), graph)
    if weak is not None and isinstance(getattr(algorithm, "notes", None), list):
        algorithm.notes.append(weak)  # type: ignore[attr-defined]  # the algorithms with a lam rule
    sim = Simulation(config, ctx, algorithm, state, transport, maps_chosen=chosen, lam_rule=lam_rule)
    sim.compiled, sim.compile_note = compiled, compile_note
    return sim


def _federation_here(
    config: RunConfig,
    dataset: FederatedDataset,
    graph: ClientGraph,
    faults: Faults,
    device: str,
    rank_world: tuple[int, int] | None,
    fed: Cohorts | None,
) -> tuple[Cohorts, Transport]:
    """The clients this process holds and how their messages travel: every client in memory, or
    across processes (``rank_world``) this rank's shard (:mod:`.shard`) and :mod:`.distributed`."""
    if rank_world is None or rank_world[1] <= 1:
        held = (
            fed if fed is not None else build_federation(dataset, config.model, l2=config.l2, device=device)
        )
        return held, InProcessTransport(faults)
    from .distributed import DistributedTransport
    from .shard import Shard, placement

    if config.topology != "none" or config.map_draw == "device":
        key = "topology" if config.topology != "none" else "map_draw=device"
        raise ConfigError(
            f"config key {key} is not supported across processes; use {setting('processes', 1)}"
        )
    rank, world = rank_world
    shard = Shard(rank, world, placement(graph, world, config.placement, config.seed))
    held = build_federation(
        dataset, config.model, l2=config.l2, device=device, clients=shard.clients.tolist()
    )
    if config.transport == "tls":  # the silo links (sheaf_fmtl.runtime.silonet)
        from ..silonet.session import current
        from .silo_transport import SiloTransport
        from .silos import attach_silo

        silo = current()
        assert silo is not None, "transport = tls: the silo joins before it builds its clients"
        attach_silo(shard.owner, graph)
        return held, SiloTransport(shard, graph, silo, faults)
    return held, DistributedTransport(shard, graph, faults)


def _data_and_graph(
    config: RunConfig,
    fed: Cohorts | None,
    graph: ClientGraph | None,
    rank_world: tuple[int, int] | None,
    dataset: FederatedDataset | None,
) -> tuple[FederatedDataset, ClientGraph]:
    """The run's data and graph. Across processes with ``clients`` set, the graph comes first and
    the rank reads only its clients' data (:mod:`.silos`); otherwise the data, then the graph."""
    if rank_world is not None and rank_world[1] > 1 and dataset is None and fed is None and config.clients:
        graph = graph if graph is not None else build_graph(config, config.clients)
        dataset = read_silo(config, graph, rank_world, lambda held: load_dataset(config, held=held))
    if dataset is None:
        dataset = fed.dataset if fed is not None else load_dataset(config)
    if graph is None:
        graph = build_graph(config, dataset.num_clients, edge_state_bytes(config, dataset))
    return dataset, graph


#: Copies of each client's parameters a run may hold at once: the model, its gradient, an optimizer's
#: two moments, and an algorithm's own two (a personal or global copy, a proxy, neighbours' values).
MODEL_COPIES = 6


def check_models_fit(fed: Cohorts) -> None:
    """Refuse (one line, before any model is drawn) models of the clients held here that this process
    cannot hold, :data:`MODEL_COPIES` float32 copies of every parameter (the architectures' real
    sizes: built once per architecture, never per client), and two copies of their BatchNorm statistics."""
    held = sum(c.size * c.dim for c in fed.cohorts)
    clients = sum(c.size for c in fed.cohorts)
    stats = sum(v.numel() for c in fed.cohorts if c.norms is not None for v in c.norms.stats.values())
    what = (
        f"the models of the {clients} clients held here ({held:,} parameters, {MODEL_COPIES} float32 copies)"
    )
    check_fits((held * MODEL_COPIES + 2 * stats) * 4.0, what, "lower clients or choose a smaller model")


def _derive(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])
