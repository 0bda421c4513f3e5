"""The federation: every client's cohort and row (``cohort_of``, ``position``), built from a
dataset by grouping clients by architecture; a shard holds only some clients."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.base import ClientSplit, FederatedDataset
from ..heap import return_freed_memory
from ..models import build_model, default_model
from ..streams import ClientStreams, CounterStreams
from .cohort import INIT_STREAM, Cohort
from .initial import draw_initial
from .ragged import Ragged
from .stacked import hold_once
from .user import UserModels, objective, preflight


@dataclass(frozen=True, eq=False)
class Architecture:
    """One model of the federation, known in every process (also where none of its clients is
    held): a CPU ``module`` skeleton, the user's builder if any, and its first client (``lead``)."""

    module: nn.Module
    factory: Callable[[int], nn.Module] | None
    lead: int

    def initial_model(self, seed: int, common: bool) -> torch.Tensor:
        """``[d]`` on the CPU: the lead client's initial model (with ``common``, every client's of
        this architecture), the same draw as its cohort's wherever it is held."""
        return draw_initial(self.module, self.factory, [self.lead], seed, INIT_STREAM[common])[0]


@dataclass(eq=False)
class Cohorts:
    """All clients (or a shard of them) grouped into cohorts, each one architecture's clients stacked,
    plus where each client sits (``cohort_of``, ``position``)."""

    dataset: FederatedDataset
    cohorts: list[Cohort]
    cohort_of: np.ndarray
    position: np.ndarray
    _index: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict, repr=False)
    batch_streams: ClientStreams | None = field(default=None, repr=False)
    all_dims: np.ndarray | None = field(default=None, repr=False)  # [N] d_i of every client
    train_sizes: np.ndarray | None = field(default=None, repr=False)  # [N] n_i of every client
    user_metric: str | None = None  # the name of the user's metric (config key metric), if any
    architectures: list[Architecture] = field(default_factory=list, repr=False)  # every model, held or not
    arch_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)  # [N] into those
    _largest: int = field(init=False, default=-1, repr=False)  # max n_i, once asked (steps_per_epoch)
    _single: bool | None = field(init=False, default=None, repr=False)  # one cohort, client order

    def with_streams(self, seed: int) -> Cohorts:
        """This federation (the same cohorts and data, not copied) with its own random streams: every
        client held here gets a mini-batch stream from ``seed`` and its id. Two runs built on one
        federation thus never share a stream."""
        out = copy.copy(self)
        out.batch_streams = CounterStreams(seed, [int(c) for cohort in self.cohorts for c in cohort.clients])
        return out

    def random_state(self) -> dict[str, Any]:
        """All random state a run advances after it is built (what a checkpoint must keep):
        ``{"batch": {client id: draw counter}}`` (:class:`~sheaf_fmtl.streams.CounterStreams`).
        Initial models and maps are drawn once from ``seed`` and global ids, so they need no state."""
        if self.batch_streams is None:
            raise ValueError("the federation's random streams are not seeded (see with_streams)")
        return {"batch": self.batch_streams.state()}

    def load_random_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`random_state` (ValueError when it lacks a client held here)."""
        if self.batch_streams is None:
            raise ValueError("the federation's random streams are not seeded (see with_streams)")
        self.batch_streams.load_state(state["batch"])

    def norm_state(self) -> dict[int, dict[str, torch.Tensor]]:
        """Each held client's BatchNorm statistics (CPU copies) by client id; clients without
        BatchNorm are absent (:mod:`.norms`)."""
        out: dict[int, dict[str, torch.Tensor]] = {}
        for cohort in self.cohorts:
            if cohort.norms is not None:
                out.update(zip(cohort._client_ids, cohort.norms.per_client(), strict=True))
        return out

    def load_norm_state(self, state: dict[int, dict[str, torch.Tensor]]) -> None:
        """Put back :meth:`norm_state` (ValueError when it lacks a held client with BatchNorm)."""
        for cohort in self.cohorts:
            if cohort.norms is not None:
                missing = [c for c in cohort._client_ids if c not in state]
                if missing:
                    raise ValueError(f"saved state has no BatchNorm statistics for client(s) {missing[:5]}")
                cohort.norms.load([state[c] for c in cohort._client_ids])

    @property
    def num_clients(self) -> int:
        return len(self.cohort_of)

    @property
    def task(self) -> str:
        return self.dataset.task

    @property
    def metric_name(self) -> str:
        """The test metric's name: ``accuracy``, ``mse`` or the user's metric's (``metrics.csv``'s
        ``test_NAME``)."""
        return self.user_metric or ("accuracy" if self.task == "classification" else "mse")

    def node_dims(self) -> np.ndarray:
        """``d_i`` of every client ``[N]``, also of those held by other processes."""
        if self.all_dims is not None:
            return self.all_dims
        return np.array([self.cohorts[c].dim for c in self.cohort_of], dtype=np.int64)

    def architecture(self, client: int) -> Architecture:
        """The architecture of any client, also one held by another process."""
        if not len(self.arch_of):
            raise ValueError("this federation was built without its architectures (see build_federation)")
        return self.architectures[int(self.arch_of[client])]

    @property
    def held(self) -> np.ndarray:
        """``[N]`` bool: the clients this process holds."""
        return self.cohort_of >= 0

    def steps_per_epoch(self, batch_size: int) -> int:
        """Steps of one pass over the largest client's data, over every client (held here or not):
        ``ceil(max n_i / B)`` (one step for ``B <= 0``)."""
        if self._largest < 0:  # asked at every local step: the sizes never change
            sizes = (
                self.train_sizes
                if self.train_sizes is not None
                else [len(c.y_train) for c in self.dataset.clients]
            )
            self._largest = int(max(sizes, default=0))
        return 1 if batch_size <= 0 else max(1, math.ceil(self._largest / batch_size))

    def per_client(self, per_cohort: list[torch.Tensor]) -> torch.Tensor:
        """Scatter per-cohort ``[C, ...]`` results back to client order ``[N, ...]`` (one cohort of every
        client in client order: its own tensor, no copy)."""
        first = per_cohort[0]
        if len(per_cohort) == 1 and self._in_order():
            return first
        out = first.new_zeros((self.num_clients, *first.shape[1:]))  # zero: clients held elsewhere
        for k, (_, values) in enumerate(zip(self.cohorts, per_cohort, strict=True)):
            out.index_copy_(0, self.client_index(k, out.device), values)
        return out

    def _in_order(self) -> bool:
        """Whether the federation is one cohort holding every client, in client order."""
        if self._single is None:
            c = self.cohorts
            self._single = len(c) == 1 and np.array_equal(c[0].clients, np.arange(self.num_clients))
        return self._single

    def client_index(self, k: int, device: torch.device) -> torch.Tensor:
        """Client ids of cohort ``k`` on ``device``, cached (built per call, a host->device copy each
        round on a GPU)."""
        key = (k, str(device))
        if key not in self._index:
            self._index[key] = torch.as_tensor(self.cohorts[k].clients, dtype=torch.long, device=device)
        return self._index[key]


#: A client's architecture: model name, input shape and the user model's architecture (or ``None``).
_Key = tuple[str, tuple[int, ...], Any]


def build_federation(
    dataset: FederatedDataset,
    model: str = "auto",
    *,
    l2: float = 0.0,
    device: str | torch.device = "cpu",
    clients: Sequence[int] | None = None,
) -> Cohorts:
    """Group clients by (model, input shape). ``model``: a name, ``auto`` (the paper's tabular
    default for the task), user code (``module:function`` or a held object's placeholder,
    :mod:`.user`: grouped also by architecture), or a comma-separated list of these assigned
    round-robin (heterogeneous models). The dataset's ``loss`` / ``metric`` replace the task's.
    ``clients``: hold only these global client ids (a shard; default all). ``cohort_of`` and
    ``position`` stay indexed by global id, ``-1`` for a client held elsewhere; a cohort's common
    initial model is seeded by its architecture's first client over the whole federation. On the
    CPU the dataset's arrays become views of the cohorts' stacks (the data held once)."""
    names = [default_model(dataset.task) if m.strip() == "auto" else m.strip() for m in model.split(",")]
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    user = UserModels.build(names, dataset, outputs)
    keys = [
        (names[i % len(names)], dataset.feature_shape(i), user.archs.get(i))
        for i in range(dataset.num_clients)
    ]
    held, distinct, local, cohort_of = _layout(keys, clients)
    first = {k: keys.index(k) for k in distinct}
    position = np.full(len(keys), -1, np.int64)
    dev = torch.device(device)
    loss, metric = objective(dataset)
    return_freed_memory()  # what reading the data freed: the stacks would not fit in its small gaps
    cohorts = []
    for c, (name, shape, arch) in enumerate(local):
        members = np.flatnonzero(cohort_of == c)
        position[members] = np.arange(len(members))
        data = _stacked(dataset, members, dev)
        lead = first[(name, shape, arch)]
        module = build_model(name, shape, outputs) if arch is None else user.modules[lead]
        cohort = Cohort(c, members, name, module.to(dev), dataset.task, l2, *data)
        cohort.first_client = lead
        if arch is not None:
            cohort.factory = user.maker(name, shape, outputs)
        cohort.use_objective(loss, metric)
        if arch is not None or loss is not None or metric is not None:
            preflight(cohort, dataset, user_model=arch is not None)
        cohorts.append(cohort)
    return_freed_memory()  # the splits' own arrays, now held by the stacks
    archs = _architectures(distinct, first, user, outputs)
    arch_of = np.array([distinct.index(k) for k in keys], np.int64)
    return Cohorts(
        dataset if held.all() else _only(dataset, held),
        cohorts,
        cohort_of,
        position,
        all_dims=np.array([count_parameters(archs[a].module) for a in arch_of], np.int64),
        train_sizes=np.array(dataset.train_sizes or [len(c.y_train) for c in dataset.clients], np.int64),
        user_metric=None if metric is None else metric.name,
        architectures=archs,
        arch_of=arch_of,
    )


def _layout(
    keys: list[_Key], clients: Sequence[int] | None
) -> tuple[np.ndarray, list[_Key], list[_Key], np.ndarray]:
    """``(held, distinct, local, cohort_of)`` of the clients' architecture ``keys``: which clients
    are held (``clients``, default all), the architectures in order of their first client, those
    with a client held here (one cohort each) and each client's cohort (``-1``: held elsewhere)."""
    held = np.zeros(len(keys), bool)
    held[np.arange(len(keys)) if clients is None else np.asarray(clients, np.int64)] = True
    distinct = list(dict.fromkeys(keys))  # architectures, in order of their first client
    local = [k for k in distinct if any(held[i] for i in range(len(keys)) if keys[i] == k)]
    cohort_of = np.array([local.index(k) if held[i] else -1 for i, k in enumerate(keys)], np.int64)
    return held, distinct, local, cohort_of


def _stacked(dataset: FederatedDataset, members: np.ndarray, device: torch.device) -> tuple[Ragged, Ragged]:
    """``(train, test)`` of clients ``members``: each split's samples end to end on ``device``
    (:class:`.ragged.Ragged`), the dataset's arrays then views of them (:func:`.stacked.hold_once`)."""
    ydtype = torch.long if dataset.task == "classification" else torch.float32
    splits = [dataset.clients[i] for i in members]
    out = []
    for names in (("x_train", "y_train"), ("x_test", "y_test")):
        xs, ys = ([getattr(s, name) for s in splits] for name in names)
        stack = Ragged.of(xs, ys, (torch.float32, ydtype), device)
        del xs, ys
        hold_once(splits, names, stack)  # each split's arrays freed as its stack is built
        out.append(stack)
    return out[0], out[1]


def _architectures(
    distinct: list[_Key], first: dict[_Key, int], user: UserModels, outputs: int
) -> list[Architecture]:
    """One :class:`Architecture` per key of ``distinct`` (model name, input shape, user
    architecture), held here or not, built without touching the global random state."""
    with torch.random.fork_rng(devices=[]):  # architectures held elsewhere too; no global draw
        return [
            Architecture(build_model(k[0], k[1], outputs), None, first[k])
            if k[2] is None
            else Architecture(user.modules[first[k]], user.maker(k[0], k[1], outputs), first[k])
            for k in distinct
        ]


def _only(dataset: FederatedDataset, held: np.ndarray) -> FederatedDataset:
    """``dataset`` with empty arrays (same feature shapes) for the clients not ``held``: a shard
    keeps no reference to the other clients' data."""

    def empty(a: np.ndarray) -> np.ndarray:
        return np.empty((0, *a.shape[1:]), a.dtype)

    clients = tuple(
        c if keep else ClientSplit(empty(c.x_train), empty(c.y_train), empty(c.x_test), empty(c.y_test))
        for c, keep in zip(dataset.clients, held.tolist(), strict=True)
    )
    return dataclasses.replace(dataset, clients=clients)


def count_parameters(module: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in module.parameters())
