"""Clients stacked by architecture (*cohorts*): padded data, flat thetas, batched local gradients.

A cohort's thetas are ``[C, d]``; its local losses ``f_i`` (L2-regularised cross-entropy or squared
loss, paper Section 5 "Evaluation") and their mini-batch gradients are computed for all ``C`` clients
at once, never client by client: closed-form batched matmuls for logistic / linear regression
(:mod:`.models.linear`), im2col convolutions batched over clients (:mod:`.models.grouped`) with one
``torch.func.grad`` per group of clients for CNNs, and ``torch.func`` (``vmap`` +
``functional_call`` + ``grad``) for any other model.

Why one module of about 400 lines: :class:`Cohort` owns a cohort's padded, stacked tensors, and its
gradients, mini-batches (random and epoch-wise) and evaluation all index those same tensors with the
same row helpers; the per-model mathematics already lives in :mod:`.models` (closed-form linear
gradients, batched CNN layers).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from .data.base import ClientSplit, FederatedDataset
from .models import build_model, default_model, grouped
from .models.linear import linear_forward, linear_gradients, linear_shape
from .streams import ClientStreams, draw_keys

EVAL_CHUNK = 512  # samples per client per evaluation chunk
EVAL_TRAIN_SAMPLES = 256  # fixed random training samples per client behind the reported train loss
EVAL_SUBSAMPLE_SEED = 1_000_003  # their streams: per client, independent of the run's seed
GROUP_CLIENTS = 4  # clients per batched CNN call on CPU (see Cohort._grouped_grad); all on CUDA
CUDA_PREDICT_GROUP = 8  # clients per batched CNN prediction on CUDA (im2col of EVAL_CHUNK samples each)


class Batch(NamedTuple):
    """One mini-batch per client of a cohort: rows ``[C, B, ...]``, labels ``[C, B]``, ``mask [C, B]``
    (1 for a real sample). ``active``: when set, the rows are those of these clients only (the
    others have no sample at this step and take no step)."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    active: torch.Tensor | None = None


@dataclass(eq=False)
class EpochPlan:
    """Mini-batches of one pass over every client's own training data (``DataLoader(shuffle=True,
    drop_last=False)`` per client): step ``s`` takes positions ``[s B, (s+1) B)`` of a fresh random
    permutation of the client's ``n_i`` samples. A client with ``n_i`` samples takes ``ceil(n_i / B)``
    steps; the clients still active at step ``s`` and their masks depend only on the ``n_i``, so they
    are built once."""

    order: torch.Tensor  # [C, n_max] random permutation of each client's valid positions first
    steps: int  # ceil(max n_i / B)


def _pad(
    arrays: list[np.ndarray], dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    n = torch.tensor([len(a) for a in arrays], dtype=torch.long)
    n_max = max(1, int(n.max()))
    out = torch.zeros((len(arrays), n_max, *arrays[0].shape[1:]), dtype=dtype)
    for k, a in enumerate(arrays):
        out[k, : len(a)] = torch.as_tensor(a, dtype=dtype)
    return out.to(device), n.to(device)


@dataclass(eq=False)
class Cohort:
    """Clients that share one architecture (same model name and input shape, so the same ``d``)."""

    index: int
    clients: np.ndarray
    model_name: str
    module: nn.Module
    task: str
    l2: float
    x_train: torch.Tensor  # [C, n_max, *feature_shape]
    y_train: torch.Tensor  # [C, n_max]
    n_train: torch.Tensor  # [C]
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_test: torch.Tensor
    names: list[str] = field(init=False)
    shapes: list[torch.Size] = field(init=False)
    numels: list[int] = field(init=False)
    group: int = field(init=False)  # clients per batched CNN call
    n_host: torch.Tensor = field(init=False)  # n_train on the CPU: plans need no device sync
    _epoch_static: dict[int, list[tuple[torch.Tensor | None, torch.Tensor]]] = field(
        init=False, default_factory=dict
    )
    _eval_rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = field(init=False, default=None)
    _key_slots: dict[int, tuple[list[int], torch.Tensor, torch.Tensor]] = field(
        init=False, default_factory=dict, repr=False
    )
    _client_ids: list[int] = field(init=False, repr=False)
    first_client: int = field(init=False, default=-1)  # global id of the architecture's first client

    def __post_init__(self) -> None:
        self.group = self.size if self.x_train.is_cuda else GROUP_CLIENTS
        self.n_host = self.n_train.cpu()
        self._client_ids = [int(c) for c in self.clients]
        params = dict(self.module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self._grad: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vmap(grad_and_value(self._loss))
        self._predict: Callable[..., torch.Tensor] = vmap(self._forward)
        self._linear_io = linear_shape(self.module)
        if grouped.supports(self.module):  # CNNs: batched im2col convolutions beat vmap(conv2d) on CPU
            self._grad = self._grouped_grad
            self._predict = self._grouped_predict
        elif self._linear_io is not None:  # logistic / linear regression: closed form, batched matmuls
            self._grad = self._linear_grad
            self._predict = self._linear_forward

    @property
    def size(self) -> int:
        return len(self.clients)

    @property
    def dim(self) -> int:
        return sum(self.numels)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(flat, self.numels)
        return {n: p.view(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def _forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.unflatten(flat), (x,))

    def _linear_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        assert self._linear_io is not None
        return linear_forward(thetas, x, self._linear_io)

    def _linear_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form gradients of ``f_i`` (:func:`sheaf_fmtl.models.linear.linear_gradients`)."""
        assert self._linear_io is not None
        return linear_gradients(thetas, x, y, mask, self._linear_io, self.task, self.l2)

    def _grouped_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(thetas, self.numels, dim=1)
        params = {
            n: p.reshape(len(thetas), *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)
        }
        return grouped.forward(self.module, params, x)  # type: ignore[arg-type]

    def _grouped_predict(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs in groups of ``self.group`` clients: on CPU the im2col buffers of all clients at
        once would not fit for large evaluation chunks."""
        g = min(self.group, CUDA_PREDICT_GROUP) if x.is_cuda else self.group
        return torch.cat(
            [self._grouped_forward(thetas[k : k + g], x[k : k + g]) for k in range(0, len(thetas), g)]
        )

    def _grouped_losses(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over clients of ``f_i`` (for one backward pass) and the per-client ``f_i``."""
        out = self._grouped_forward(thetas, x)
        per = self._per_sample(out.reshape(-1, *out.shape[2:]), y.reshape(-1)).view(mask.shape)
        count = mask.sum(1)
        f = (per * mask).sum(1) / count.clamp(min=1)
        f = f + (count > 0).to(thetas.dtype) * 0.5 * self.l2 * (thetas * thetas).sum(1)
        return f.sum(), f

    def _grouped_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients in groups of ``self.group`` clients, so that on CPU the im2col buffers stay small
        (larger groups were slower on a 2-core CPU; ``sheaf-fmtl bench`` times the group size in use);
        on CUDA one call takes every client."""
        g = self.group
        parts = [
            grad(self._grouped_losses, has_aux=True)(*(t[k : k + g] for t in (thetas, x, y, mask)))
            for k in range(0, len(thetas), g)
        ]
        return torch.cat([g for g, _ in parts]), torch.cat([f for _, f in parts])

    def _per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="none")
        return (out.squeeze(-1) - y) ** 2

    def _loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``f_i(theta) = mean_batch loss + l2/2 ||theta||^2``; a client without data has ``f_i = 0``."""
        count = mask.sum()
        data = (self._per_sample(self._forward(flat, x), y) * mask).sum() / count.clamp(min=1)
        return data + (count > 0).to(flat.dtype) * 0.5 * self.l2 * (flat * flat).sum()

    def _rows(self, t: torch.Tensor, idx: torch.Tensor, clients: torch.Tensor | None = None) -> torch.Tensor:
        """``t[c, idx[k]]`` for ``c = clients[k]`` (every client when ``None``), without copying the
        other rows (``index_select`` is ~3x faster than ``t[r, idx]``)."""
        first = torch.arange(len(idx), device=idx.device) if clients is None else clients
        flat = (idx + t.shape[1] * first[:, None]).flatten()
        return t.flatten(0, 1).index_select(0, flat).view(*idx.shape, *t.shape[2:])

    def batch_len(self, batch_size: int) -> int:
        """Samples per client in a mini-batch (``batch_size <= 0``: all of them)."""
        n_max = int(self.x_train.shape[1])
        return n_max if batch_size <= 0 else min(batch_size, n_max)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Steps of one pass over the largest client's data: ``ceil(max n_i / B)``."""
        return max(1, math.ceil(int(self.n_host.max()) / max(1, self.batch_len(batch_size))))

    def _valid(self) -> torch.Tensor:
        return torch.arange(self.x_train.shape[1], device=self.n_train.device) < self.n_train[:, None]

    def _random_keys(self, source: ClientStreams | torch.Generator, draw_above: int = 0) -> torch.Tensor:
        """Uniform keys per (client, sample), each client's from its own stream
        (:mod:`sheaf_fmtl.streams`), 2 on padding (sorts last). Clients with ``n_i <= draw_above``
        draw nothing (their keys are 0: a batch of at least ``n_i`` takes all their samples)."""
        if draw_above not in self._key_slots:  # from the n_i alone: built once, no sync afterwards
            n = self.n_host
            drawn = torch.where(n > draw_above, n, torch.zeros_like(n))
            pos = torch.arange(self.x_train.shape[1])
            base = torch.full((len(n), len(pos)), 2.0).masked_fill_(pos < n[:, None], 0.0)
            slots = torch.nonzero((pos < drawn[:, None]).flatten()).flatten()  # row-major
            self._key_slots[draw_above] = (drawn.tolist(), slots, base)
        counts, slots, base = self._key_slots[draw_above]
        parts = draw_keys(source, self._client_ids, counts)
        keys = base.clone().view(-1).index_copy_(0, slots, torch.cat(parts)).view(base.shape)
        # drawn on the CPU (same batches on every device), copied without a host-device sync
        if self.x_train.is_cuda:
            keys = keys.pin_memory()
        return keys.to(self.x_train.device, non_blocking=True)

    def sample(self, batch_size: int, source: ClientStreams | torch.Generator) -> Batch:
        """A mini-batch per client: ``min(batch_size, n_i)`` samples drawn without replacement, from
        the client's own stream (only clients with ``n_i > batch_size`` draw). ``batch_size <= 0``
        (or at least every client's size) gives the full local data."""
        n_max = self.x_train.shape[1]
        if batch_size <= 0 or batch_size >= n_max:
            return Batch(self.x_train, self.y_train, self._valid().to(self.x_train.dtype))
        keys = self._random_keys(source, draw_above=batch_size)
        idx = keys.topk(batch_size, dim=1, largest=False, sorted=False).indices
        valid = self._valid()
        mask = self._rows(valid, idx).to(self.x_train.dtype)
        return Batch(self._rows(self.x_train, idx), self._rows(self.y_train, idx), mask)

    def epoch(self, batch_size: int, source: ClientStreams | torch.Generator) -> EpochPlan:
        """A fresh random order of every client's samples for one local epoch (see :class:`EpochPlan`),
        each from the client's own stream."""
        return EpochPlan(self._random_keys(source).argsort(dim=1), self.steps_per_epoch(batch_size))

    def epoch_batch(self, plan: EpochPlan, step: int, batch_size: int) -> Batch | None:
        """Step ``step`` of ``plan``: the clients with samples left and their next batch; ``None``
        when no client of the cohort has any left (the cohort then takes no step)."""
        if step >= plan.steps:
            return None
        b = self.batch_len(batch_size)
        if b not in self._epoch_static:  # active clients and masks per step: from the n_i alone
            n, n_max = self.n_host, int(self.x_train.shape[1])
            static = []
            for s in range(plan.steps):
                rows = torch.nonzero(n > s * b).flatten()
                pos = torch.arange(s * b, min((s + 1) * b, n_max))
                mask = (pos[None, :] < n[rows][:, None]).to(self.x_train.dtype)
                idx = None if len(rows) == self.size else rows.to(self.n_train.device)
                static.append((idx, mask.to(self.n_train.device)))
            self._epoch_static[b] = static
        active, mask = self._epoch_static[b][step]
        order = plan.order[:, step * b : (step + 1) * b]
        if active is not None:
            order = order.index_select(0, active)
        x, y = self._rows(self.x_train, order, active), self._rows(self.y_train, order, active)
        return Batch(x, y, mask, active)

    def gradients(
        self, thetas: torch.Tensor, batch: Batch | tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f_i [C, d], f_i [C])`` on the batch, all clients batched (see the module docstring).
        Clients left out of an ``active`` batch get a zero gradient and ``f_i = 0``."""
        x, y, mask, *rest = batch
        active = rest[0] if rest else None
        if active is None:
            return self._grad(thetas, x, y, mask)
        g, f = self._grad(thetas.index_select(0, active), x, y, mask)
        return (
            torch.zeros_like(thetas).index_copy_(0, active, g),
            thetas.new_zeros(len(thetas)).index_copy_(0, active, f),
        )

    def _chunked(self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, n: torch.Tensor, score: str):
        """Per-client sums over the valid samples of ``x`` of the loss or the test score, in sample
        chunks so that evaluating large datasets never holds every activation at once."""
        clients, n_max = x.shape[:2]
        valid = torch.arange(n_max, device=n.device) < n[:, None]
        total = thetas.new_zeros(clients)
        for s in range(0, n_max, EVAL_CHUNK):
            out = self._predict(thetas, x[:, s : s + EVAL_CHUNK])
            flat, yy = out.reshape(-1, *out.shape[2:]), y[:, s : s + EVAL_CHUNK].reshape(-1)
            if score == "loss":
                per = self._per_sample(flat, yy)
            elif self.task == "classification":
                per = (flat.argmax(-1) == yy).to(out.dtype)
            else:
                per = (flat.squeeze(-1) - yy) ** 2
            total += (per.view(clients, -1) * valid[:, s : s + EVAL_CHUNK]).sum(1)
        return total, n.to(total.dtype)

    def _eval_subsample(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``EVAL_TRAIN_SAMPLES`` training samples per client (all when fewer), fixed at first use:
        a random subset per client from a generator seeded by the client's id alone."""
        if self._eval_rows is None:
            n_max = self.x_train.shape[1]
            k = min(EVAL_TRAIN_SAMPLES, n_max)
            streams = ClientStreams(EVAL_SUBSAMPLE_SEED, self.clients.tolist())
            idx = self._random_keys(streams).argsort(dim=1)[:, :k]
            self._eval_rows = (
                self._rows(self.x_train, idx),
                self._rows(self.y_train, idx),
                self.n_train.clamp(max=k),
            )
        return self._eval_rows

    def train_loss(self, thetas: torch.Tensor, full: bool = False) -> torch.Tensor:
        """``f_i(theta_i)`` per client ``[C]``, on a fixed random subsample of ``EVAL_TRAIN_SAMPLES``
        training samples per client (the reported estimate; ``full=True``: all training data)."""
        x, y, n = (self.x_train, self.y_train, self.n_train) if full else self._eval_subsample()
        total, count = self._chunked(thetas, x, y, n, "loss")
        reg = (count > 0).to(thetas.dtype) * 0.5 * self.l2 * (thetas * thetas).sum(1)
        return total / count.clamp(min=1) + reg

    def test_metric(self, thetas: torch.Tensor) -> torch.Tensor:
        """Per client: test accuracy (classification) or test MSE (regression), ``[C]``."""
        total, count = self._chunked(thetas, self.x_test, self.y_test, self.n_test, "score")
        return total / count.clamp(min=1)

    def init_thetas(self, seed: int, common: bool = False) -> torch.Tensor:
        """Parameters from the module's default initialiser: one draw per client, seeded per client,
        or (``common``) one draw seeded by the architecture's first client (``first_client``; the
        cohort's first when unset), shared by every client."""
        if common:
            lead = self.first_client if self.first_client >= 0 else int(self.clients[0])
            first = self.init_thetas_for([lead], seed, stream=8)
            return first.expand(self.size, -1).clone()
        return self.init_thetas_for(self.clients.tolist(), seed, stream=7)

    def init_thetas_for(self, clients: list[int], seed: int, stream: int) -> torch.Tensor:
        """Drawn on a CPU copy of the module, so every device starts from the same models."""
        module = copy.deepcopy(self.module).cpu()
        rows = []
        for client in clients:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(np.random.SeedSequence([seed, stream, client]).generate_state(1)[0]))
                for m in module.modules():
                    reset = getattr(m, "reset_parameters", None)
                    if callable(reset):
                        reset()
                rows.append(torch.cat([p.detach().reshape(-1) for p in module.parameters()]))
        return torch.stack(rows).to(self.x_train.device)


@dataclass(eq=False)
class Federation:
    """All clients: cohorts plus where each client sits (``cohort_of``, ``position``)."""

    dataset: FederatedDataset
    cohorts: list[Cohort]
    cohort_of: np.ndarray
    position: np.ndarray
    _index: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict, repr=False)
    batch_streams: ClientStreams | None = field(default=None, repr=False)
    all_dims: np.ndarray | None = field(default=None, repr=False)  # [N] d_i of every client
    train_sizes: np.ndarray | None = field(default=None, repr=False)  # [N] n_i of every client

    def with_streams(self, seed: int) -> Federation:
        """This federation (the same cohorts and data, not copied) with its own random streams: every
        client held here gets a mini-batch stream from ``seed`` and its id. Two runs built on one
        federation thus never share a stream."""
        out = copy.copy(self)
        out.batch_streams = ClientStreams(seed, [int(c) for cohort in self.cohorts for c in cohort.clients])
        return out

    def random_state(self) -> dict[str, Any]:
        """All random state a run advances after it is built (what a checkpoint must keep):
        ``{"batch": {client id: generator state}}``. Initial models and maps are drawn once from
        ``seed`` and global ids, so they need no state."""
        if self.batch_streams is None:
            raise ValueError("the federation's random streams are not seeded (see with_streams)")
        return {"batch": self.batch_streams.state()}

    def load_random_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`random_state` (ValueError when it lacks a client held here)."""
        if self.batch_streams is None:
            raise ValueError("the federation's random streams are not seeded (see with_streams)")
        self.batch_streams.load_state(state["batch"])

    @property
    def num_clients(self) -> int:
        return len(self.cohort_of)

    @property
    def task(self) -> str:
        return self.dataset.task

    def node_dims(self) -> np.ndarray:
        """``d_i`` of every client ``[N]``, also of those held by other processes."""
        if self.all_dims is not None:
            return self.all_dims
        return np.array([self.cohorts[c].dim for c in self.cohort_of], dtype=np.int64)

    @property
    def held(self) -> np.ndarray:
        """``[N]`` bool: the clients this process holds."""
        return self.cohort_of >= 0

    def steps_per_epoch(self, batch_size: int) -> int:
        """Steps of one pass over the largest client's data, over every client (held here or not):
        ``ceil(max n_i / B)`` (one step for ``B <= 0``)."""
        sizes = (
            self.train_sizes
            if self.train_sizes is not None
            else [len(c.y_train) for c in self.dataset.clients]
        )
        return 1 if batch_size <= 0 else max(1, math.ceil(max(sizes, default=0) / batch_size))

    def per_client(self, per_cohort: list[torch.Tensor]) -> torch.Tensor:
        """Scatter per-cohort ``[C, ...]`` results back to client order ``[N, ...]``."""
        first = per_cohort[0]
        out = first.new_zeros((self.num_clients, *first.shape[1:]))  # zero: clients held elsewhere
        for k, (_, values) in enumerate(zip(self.cohorts, per_cohort, strict=True)):
            out.index_copy_(0, self.client_index(k, out.device), values)
        return out

    def client_index(self, k: int, device: torch.device) -> torch.Tensor:
        """Client ids of cohort ``k`` on ``device``, cached (built per call, a host->device copy each
        round on a GPU)."""
        key = (k, str(device))
        if key not in self._index:
            self._index[key] = torch.as_tensor(self.cohorts[k].clients, dtype=torch.long, device=device)
        return self._index[key]


def build_federation(
    dataset: FederatedDataset,
    model: str = "auto",
    *,
    l2: float = 0.0,
    device: str | torch.device = "cpu",
    clients: Sequence[int] | None = None,
) -> Federation:
    """Group clients by (model, input shape). ``model``: a name, ``auto`` (the paper's tabular
    default for the task), or a comma-separated list assigned round-robin (heterogeneous models).
    ``clients``: hold only these global client ids (a shard; default all). ``cohort_of`` and
    ``position`` stay indexed by global id, ``-1`` for a client held elsewhere; a cohort's common
    initial model is seeded by its architecture's first client over the whole federation."""
    names = [default_model(dataset.task) if m.strip() == "auto" else m.strip() for m in model.split(",")]
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    keys = [(names[i % len(names)], dataset.feature_shape(i)) for i in range(dataset.num_clients)]
    held = np.zeros(len(keys), bool)
    held[np.arange(len(keys)) if clients is None else np.asarray(clients, np.int64)] = True
    distinct = list(dict.fromkeys(keys))  # architectures, in order of their first client
    first = {k: keys.index(k) for k in distinct}
    local = [k for k in distinct if any(held[i] for i in range(len(keys)) if keys[i] == k)]
    cohort_of = np.array([local.index(k) if held[i] else -1 for i, k in enumerate(keys)], np.int64)
    position = np.full(len(keys), -1, np.int64)
    dev = torch.device(device)
    ydtype = torch.long if dataset.task == "classification" else torch.float32
    cohorts = []
    for c, (name, shape) in enumerate(local):
        members = np.flatnonzero(cohort_of == c)
        position[members] = np.arange(len(members))
        splits = [dataset.clients[i] for i in members]
        x_tr, n_tr = _pad([s.x_train for s in splits], torch.float32, dev)
        y_tr, _ = _pad([s.y_train for s in splits], ydtype, dev)
        x_te, n_te = _pad([s.x_test for s in splits], torch.float32, dev)
        y_te, _ = _pad([s.y_test for s in splits], ydtype, dev)
        module = build_model(name, shape, outputs).to(dev)
        cohort = Cohort(c, members, name, module, dataset.task, l2, x_tr, y_tr, n_tr, x_te, y_te, n_te)
        cohort.first_client = first[(name, shape)]
        cohorts.append(cohort)
    with torch.random.fork_rng(devices=[]):  # d_i of architectures held elsewhere; no global draw
        dims = {k: count_parameters(build_model(k[0], k[1], outputs)) for k in distinct}
    all_dims = np.array([dims[k] for k in keys], np.int64)
    sizes = np.array([len(c.y_train) for c in dataset.clients], np.int64)
    kept = dataset if held.all() else _only(dataset, held)
    return Federation(kept, cohorts, cohort_of, position, all_dims=all_dims, train_sizes=sizes)


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
