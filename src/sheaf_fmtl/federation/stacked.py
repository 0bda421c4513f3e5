"""A cohort's clients stacked: their samples end to end (:class:`.ragged.Ragged`, no padding),
mini-batches (random and epoch-wise) and the fixed evaluation subsample, all gathered by position
in each client's own data (:meth:`.ragged.Ragged.gather`).

:class:`sheaf_fmtl.federation.Cohort` adds the model: batched local gradients and evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from ..data.base import ClientSplit
from ..streams import ClientStreams, fill_keys
from .ragged import Ragged

EVAL_TRAIN_SAMPLES = 256  # fixed random training samples per client behind the reported train loss
EVAL_SUBSAMPLE_SEED = 1_000_003  # their streams: per client, independent of the run's seed
STREAM_BLOCK = 4096  # clients whose subsample generators (about 5 KB each) exist at once
SORT_BLOCK = 8192  # clients whose epoch keys are sorted at once


class Batch(NamedTuple):
    """One mini-batch per client of a cohort: rows ``[C, B, ...]``, labels ``[C, B]``, ``mask [C, B]``
    (1 for a real sample). ``active``: when set, the rows are those of these clients only (the
    others have no sample at this step and take no step; :meth:`StackedClients.active_host` has them
    on the CPU). ``source``: when set, ``x`` holds not the inputs but their stored rows ``[C, B]`` in
    this split, gathered a block of clients at a time by the gradient that reads them (a lazy batch:
    :meth:`StackedClients.sample` and :meth:`StackedClients.epoch_batch` with ``lazy``)."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    active: torch.Tensor | None = None
    source: Ragged | None = None


@dataclass(eq=False)
class EpochPlan:
    """Mini-batches of one pass over every client's own training data (``DataLoader(shuffle=True,
    drop_last=False)`` per client): step ``s`` takes positions ``[s B, (s+1) B)`` of a fresh random
    permutation of the client's ``n_i`` samples. A client with ``n_i`` samples takes ``ceil(n_i / B)``
    steps; the clients still active at step ``s`` and their masks depend only on the ``n_i``, so they
    are built once."""

    order: torch.Tensor  # [C, n_max] int32: a random permutation of each client's positions, real ones first
    steps: int  # ceil(max n_i / B)


def hold_once(splits: Sequence[ClientSplit], names: tuple[str, str], stack: Ragged) -> None:
    """Point each split's arrays ``names`` (inputs, labels) at its rows of ``stack`` (NumPy views,
    equal values), so that the data is held once, by the cohort's stack: the split's own arrays are
    freed when nothing else holds them (writing into the split now writes the cohort's data). On
    the CPU only, and where the dtypes are the arrays'."""
    if stack.x.device.type != "cpu":
        return
    for split, views in zip(splits, stack.client_views(), strict=True):
        for name, view in zip(names, views, strict=True):
            own = getattr(split, name)
            if own.dtype == view.dtype and own.shape[1:] == view.shape[1:] and len(own) == len(view):
                object.__setattr__(split, name, view)  # a frozen split: same values, shared storage


@dataclass(eq=False)
class StackedClients:
    """The data of clients that share one architecture (the fields of a
    :class:`sheaf_fmtl.federation.Cohort`, in its constructor's order) and their mini-batches."""

    index: int
    clients: np.ndarray
    model_name: str
    module: nn.Module
    task: str
    l2: float
    train: Ragged
    test: Ragged
    _epoch_static: dict[int, list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]]] = field(
        init=False, default_factory=dict
    )
    _eval_rows: tuple[torch.Tensor, torch.Tensor] | None = field(init=False, default=None)
    _key_slots: dict[int, tuple[torch.Tensor, list[int], list[torch.Tensor]]] = field(
        init=False, default_factory=dict, repr=False
    )
    _padded: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(
        init=False, default_factory=dict, repr=False
    )
    _client_ids: list[int] = field(init=False, repr=False)
    first_client: int = field(init=False, default=-1)  # global id of the architecture's first client

    def __post_init__(self) -> None:
        self._client_ids = [int(c) for c in self.clients]

    # -- the splits: sizes, and padded stacks for code that wants them ---------------------------
    @property
    def n_train(self) -> torch.Tensor:
        return self.train.n

    @property
    def n_test(self) -> torch.Tensor:
        return self.test.n

    @property
    def n_host(self) -> torch.Tensor:
        """``n_train`` on the CPU: plans need no device sync."""
        return self.train.n_host

    @property
    def device(self) -> torch.device:
        return self.train.x.device

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return self.train.feature_shape

    def _stack(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        if split not in self._padded:  # built on request, kept (the full-batch step reads it each round)
            self._padded[split] = getattr(self, split).padded()
        return self._padded[split]

    @property
    def x_train(self) -> torch.Tensor:
        """The training inputs zero-padded ``[C, n_max, ...]``, built at first use and kept (the
        round's own paths gather from :attr:`train` and never build it, except a full batch)."""
        return self._stack("train")[0]

    @property
    def y_train(self) -> torch.Tensor:
        return self._stack("train")[1]

    @property
    def x_test(self) -> torch.Tensor:
        return self._stack("test")[0]

    @property
    def y_test(self) -> torch.Tensor:
        return self._stack("test")[1]

    @property
    def size(self) -> int:
        return len(self.clients)

    def batch_len(self, batch_size: int) -> int:
        """Samples per client in a mini-batch (``batch_size <= 0``: all of them)."""
        n_max = self.train.n_max
        return n_max if batch_size <= 0 else min(batch_size, n_max)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Steps of one pass over the largest client's data: ``ceil(max n_i / B)``."""
        return max(1, math.ceil(self.train.n_max / max(1, self.batch_len(batch_size))))

    def _valid(self) -> torch.Tensor:
        return torch.arange(self.train.n_max, device=self.n_train.device) < self.n_train[:, None]

    def _random_keys(self, source: ClientStreams | torch.Generator, draw_above: int = 0) -> torch.Tensor:
        """Uniform keys per (client, sample), each client's from its own stream
        (:mod:`sheaf_fmtl.streams`), 2 on padding (sorts last). Clients with ``n_i <= draw_above``
        draw nothing (their keys are 0: a batch of at least ``n_i`` takes all their samples)."""
        if draw_above not in self._key_slots:  # from the n_i alone: built once, no sync afterwards
            n, sizes = self.n_host, self.n_host.tolist()
            pos = torch.arange(self.train.n_max)
            buf = torch.full((len(n), len(pos)), 2.0).masked_fill_(pos < n[:, None], 0.0)
            drawn = [k for k, nk in enumerate(sizes) if nk > draw_above]
            rows = [buf[k, : sizes[k]] for k in drawn]  # views: each call redraws exactly these
            self._key_slots[draw_above] = (buf, [self._client_ids[k] for k in drawn], rows)
        buf, ids, rows = self._key_slots[draw_above]
        fill_keys(source, ids, rows)  # in place, client after client
        # drawn on the CPU (same batches on every device), copied without a host-device sync; on the
        # CPU the buffer itself, redrawn at the next call: every caller reads it at once
        if self.device.type != "cuda":
            return buf
        return buf.pin_memory().to(self.device, non_blocking=True)

    @property
    def lazy_inputs(self) -> bool:
        """Whether this cohort's gradients read a lazy batch (:class:`Batch` ``source``)."""
        return False

    def _batch(self, pos: torch.Tensor, mask: torch.Tensor, active: torch.Tensor | None, lazy: bool) -> Batch:
        """The batch of training positions ``pos [C', b]`` of the clients ``active`` (all: ``None``),
        its inputs gathered now, or with ``lazy`` (where :attr:`lazy_inputs`) by the gradient."""
        if lazy and self.lazy_inputs:
            rows = self.train.rows(pos, active)
            return Batch(
                rows, self.train.y.index_select(0, rows.view(-1)).view(rows.shape), mask, active, self.train
            )
        return Batch(*self.train.gather(pos, active), mask, active)

    def sample(self, batch_size: int, source: ClientStreams | torch.Generator, lazy: bool = False) -> Batch:
        """A mini-batch per client: ``min(batch_size, n_i)`` samples drawn without replacement, from
        the client's own stream (only clients with ``n_i > batch_size`` draw). ``batch_size <= 0``
        (or at least every client's size) gives the full local data. ``lazy``: see :meth:`_batch`."""
        if batch_size <= 0 or batch_size >= self.train.n_max:
            return Batch(self.x_train, self.y_train, self._valid().to(self.train.x.dtype))
        keys = self._random_keys(source, draw_above=batch_size)
        idx = keys.topk(batch_size, dim=1, largest=False, sorted=False).indices
        mask = (idx < self.n_train[:, None]).to(self.train.x.dtype)
        return self._batch(idx, mask, None, lazy)

    def epoch(self, batch_size: int, source: ClientStreams | torch.Generator) -> EpochPlan:
        """A fresh random order of every client's samples for one local epoch (see :class:`EpochPlan`),
        each from the client's own stream."""
        keys = self._random_keys(source)
        order = torch.empty(keys.shape, dtype=torch.int32, device=keys.device)
        for lo in range(0, len(keys), SORT_BLOCK):  # a block of clients at a time: small temporaries
            order[lo : lo + SORT_BLOCK] = keys[lo : lo + SORT_BLOCK].argsort(dim=1)
        return EpochPlan(order, self.steps_per_epoch(batch_size))

    def epoch_batch(self, plan: EpochPlan, step: int, batch_size: int, lazy: bool = False) -> Batch | None:
        """Step ``step`` of ``plan``: the clients with samples left and their next batch; ``None``
        when no client of the cohort has any left (the cohort then takes no step). ``lazy``: see
        :meth:`_batch`."""
        if step >= plan.steps:
            return None
        b = self.batch_len(batch_size)
        if b not in self._epoch_static:  # active clients and masks per step: from the n_i alone
            n, n_max = self.n_host, self.train.n_max
            static = []
            for s in range(plan.steps):
                rows = torch.nonzero(n > s * b).flatten()
                pos = torch.arange(s * b, min((s + 1) * b, n_max))
                mask = (pos[None, :] < n[rows][:, None]).to(self.train.x.dtype)
                idx = None if len(rows) == self.size else rows.to(self.n_train.device)
                static.append((idx, mask.to(self.n_train.device), rows))
            self._epoch_static[b] = static
        active, mask, _ = self._epoch_static[b][step]
        cols = plan.order[:, step * b : (step + 1) * b]  # this step's positions, [C, b']
        if active is not None:
            cols = cols.index_select(0, active)
        return self._batch(cols, mask, active, lazy)

    def active_host(self, active: torch.Tensor) -> torch.Tensor:
        """A batch's ``active`` clients on the CPU: the host copy an epoch step was built from (no
        device read), else a copy."""
        for static in self._epoch_static.values():
            hit = next((rows for idx, _, rows in static if idx is active), None)
            if hit is not None:
                return hit
        return active.cpu()

    def _eval_subsample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(idx, n)``: the positions ``[C, k]`` (int32) of ``EVAL_TRAIN_SAMPLES`` training samples
        per client (all when fewer; real ones first) and their counts, fixed at first use: a random
        subset per client from a generator seeded by the client's id alone, the generators made
        :data:`STREAM_BLOCK` clients at a time. Positions only: their rows are gathered a chunk at a
        time (:meth:`train_rows`), never copied whole."""
        if self._eval_rows is None:
            n_max = self.train.n_max
            k = min(EVAL_TRAIN_SAMPLES, n_max)
            sizes = self.n_host.tolist()
            keys = torch.full((len(sizes), n_max), 2.0)  # 2 on padding: sorts last
            keys.masked_fill_(torch.arange(n_max) < self.n_host[:, None], 0.0)
            for lo in range(0, len(sizes), STREAM_BLOCK):
                ids = self._client_ids[lo : lo + STREAM_BLOCK]
                rows = [keys[lo + j, : sizes[lo + j]] for j in range(len(ids))]
                ClientStreams(EVAL_SUBSAMPLE_SEED, ids).fill(ids, rows)
            idx = torch.empty((len(sizes), k), dtype=torch.int32)
            for lo in range(0, len(sizes), SORT_BLOCK):  # small temporaries
                idx[lo : lo + SORT_BLOCK] = keys[lo : lo + SORT_BLOCK].argsort(dim=1)[:, :k]
            self._eval_rows = (idx.to(self.device), self.n_train.clamp(max=k))
        return self._eval_rows

    def train_rows(
        self, idx: torch.Tensor, clients: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of the training samples at positions ``idx [R, k]`` of the clients at
        positions ``clients`` (every client, in order, when ``None``)."""
        return self.train.gather(idx, clients)
