"""A cohort's clients stacked: padded data tensors, mini-batches (random and epoch-wise) and the
fixed evaluation subsample, all indexed with the same row helper (:meth:`StackedClients._rows`).

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

EVAL_TRAIN_SAMPLES = 256  # fixed random training samples per client behind the reported train loss
EVAL_SUBSAMPLE_SEED = 1_000_003  # their streams: per client, independent of the run's seed
STREAM_BLOCK = 4096  # clients whose subsample generators (about 5 KB each) exist at once


class Batch(NamedTuple):
    """One mini-batch per client of a cohort: rows ``[C, B, ...]``, labels ``[C, B]``, ``mask [C, B]``
    (1 for a real sample). ``active``: when set, the rows are those of these clients only (the
    others have no sample at this step and take no step; :meth:`StackedClients.active_host` has them
    on the CPU)."""

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


def pad(
    arrays: list[np.ndarray], dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client arrays zero-padded to one ``[C, n_max, ...]`` tensor on ``device``, and the ``n_i``."""
    n = torch.tensor([len(a) for a in arrays], dtype=torch.long)
    n_max = max(1, int(n.max()))
    out = torch.zeros((len(arrays), n_max, *arrays[0].shape[1:]), dtype=dtype)
    rows = out.numpy()  # filled through NumPy: any array, read-only ones too, without a warning
    for k, a in enumerate(arrays):
        rows[k, : len(a)] = a
    return out.to(device), n.to(device)


def hold_once(splits: Sequence[ClientSplit], name: str, stack: torch.Tensor) -> None:
    """Point each split's ``name`` array at its rows of ``stack`` (NumPy views, equal values), so
    that the data is held once, by the cohort's padded stack: the split's own array is freed when
    nothing else holds it (writing into the split now writes the cohort's data). On the CPU only,
    and where the dtype is the array's."""
    if stack.device.type != "cpu":
        return
    rows = stack.numpy()
    for k, split in enumerate(splits):
        own = getattr(split, name)
        if own.dtype != rows.dtype or own.shape[1:] != rows.shape[2:]:
            continue
        object.__setattr__(split, name, rows[k, : len(own)])  # a frozen split: same values, shared storage


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
    x_train: torch.Tensor  # [C, n_max, *feature_shape]
    y_train: torch.Tensor  # [C, n_max]
    n_train: torch.Tensor  # [C]
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_test: torch.Tensor
    n_host: torch.Tensor = field(init=False)  # n_train on the CPU: plans need no device sync
    _epoch_static: dict[int, list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]]] = field(
        init=False, default_factory=dict
    )
    _eval_rows: tuple[torch.Tensor, torch.Tensor] | None = field(init=False, default=None)
    _key_slots: dict[int, tuple[torch.Tensor, list[int], list[torch.Tensor]]] = field(
        init=False, default_factory=dict, repr=False
    )
    _plan_rows: tuple[EpochPlan, int, list[torch.Tensor]] | None = field(init=False, default=None, repr=False)
    _active_rows: dict[int, tuple[torch.Tensor, list[int]]] = field(
        init=False, default_factory=dict, repr=False
    )
    _client_ids: list[int] = field(init=False, repr=False)
    first_client: int = field(init=False, default=-1)  # global id of the architecture's first client

    def __post_init__(self) -> None:
        self.n_host = self.n_train.cpu()
        self._client_ids = [int(c) for c in self.clients]

    @property
    def size(self) -> int:
        return len(self.clients)

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
            n, sizes = self.n_host, self.n_host.tolist()
            pos = torch.arange(self.x_train.shape[1])
            buf = torch.full((len(n), len(pos)), 2.0).masked_fill_(pos < n[:, None], 0.0)
            drawn = [k for k, nk in enumerate(sizes) if nk > draw_above]
            rows = [buf[k, : sizes[k]] for k in drawn]  # views: each call redraws exactly these
            self._key_slots[draw_above] = (buf, [self._client_ids[k] for k in drawn], rows)
        buf, ids, rows = self._key_slots[draw_above]
        fill_keys(source, ids, rows)  # in place, client after client
        # drawn on the CPU (same batches on every device), copied without a host-device sync
        keys = buf.pin_memory() if self.x_train.is_cuda else buf.clone()  # buf is redrawn next call
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
                static.append((idx, mask.to(self.n_train.device), rows))
            self._epoch_static[b] = static
        active, mask, rows = self._epoch_static[b][step]
        flat = self._plan_index(plan, b)[step]  # [C or active, b'] rows of x_train.flatten(0, 1)
        idx = flat.reshape(-1)  # a view, except on a last, shorter step
        x = self.x_train.flatten(0, 1).index_select(0, idx).view(*flat.shape, *self.x_train.shape[2:])
        y = self.y_train.flatten().index_select(0, idx).view(flat.shape)
        return Batch(x, y, mask, active)

    def active_host(self, active: torch.Tensor) -> torch.Tensor:
        """A batch's ``active`` clients on the CPU: the host copy an epoch step was built from (no
        device read), else a copy."""
        for static in self._epoch_static.values():
            hit = next((rows for idx, _, rows in static if idx is active), None)
            if hit is not None:
                return hit
        return active.cpu()

    def _plan_index(self, plan: EpochPlan, b: int) -> list[torch.Tensor]:
        """Per step of ``plan``, ``[active clients, b']``: its positions as rows of
        ``x_train.flatten(0, 1)`` (``c * n_max + order[c, s b + k]``), built once per plan (two ops)
        so that a step gathers its batch with one ``index_select`` per tensor."""
        cached = self._plan_rows
        if cached is not None and cached[0] is plan and cached[1] == b:
            return cached[2]
        static = self._epoch_static[b]
        n_max, size = plan.order.shape[1], self.size
        first = torch.arange(size, device=plan.order.device)[:, None] * n_max
        flat = torch.nn.functional.pad(plan.order + first, (0, plan.steps * b - n_max))
        by_step = flat.view(size, plan.steps, b).transpose(0, 1)  # [steps, C, b]
        if b not in self._active_rows:  # rows (s * C + c) of the steps' active clients, from the n_i
            parts = [torch.arange(size) if a is None else rows for a, _, rows in static]
            rows = torch.cat([p + s * size for s, p in enumerate(parts)]).to(plan.order.device)
            self._active_rows[b] = (rows, [len(p) for p in parts])
        rows, counts = self._active_rows[b]
        picked = by_step.reshape(-1, b).index_select(0, rows).split(counts)  # type: ignore[no-untyped-call]
        steps = [p[:, : m.shape[1]] for p, (_, m, _) in zip(picked, static, strict=True)]
        self._plan_rows = (plan, b, steps)
        return steps

    def _eval_subsample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(idx, n)``: the positions ``[C, k]`` (int32) of ``EVAL_TRAIN_SAMPLES`` training samples
        per client (all when fewer; real ones first) and their counts, fixed at first use: a random
        subset per client from a generator seeded by the client's id alone, the generators made
        :data:`STREAM_BLOCK` clients at a time. Positions only: their rows are gathered a chunk at a
        time (:meth:`train_rows`), never copied whole."""
        if self._eval_rows is None:
            n_max = self.x_train.shape[1]
            k = min(EVAL_TRAIN_SAMPLES, n_max)
            sizes = self.n_host.tolist()
            keys = torch.full((len(sizes), n_max), 2.0)  # 2 on padding: sorts last
            keys.masked_fill_(torch.arange(n_max) < self.n_host[:, None], 0.0)
            for lo in range(0, len(sizes), STREAM_BLOCK):
                ids = self._client_ids[lo : lo + STREAM_BLOCK]
                rows = [keys[lo + j, : sizes[lo + j]] for j in range(len(ids))]
                ClientStreams(EVAL_SUBSAMPLE_SEED, ids).fill(ids, rows)
            idx = keys.argsort(dim=1)[:, :k].to(torch.int32)
            self._eval_rows = (idx.to(self.x_train.device), self.n_train.clamp(max=k))
        return self._eval_rows

    def train_rows(
        self, idx: torch.Tensor, clients: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x, y)`` of the training samples at positions ``idx [R, k]`` of the clients at
        positions ``clients`` (every client, in order, when ``None``)."""
        return self._rows(self.x_train, idx, clients), self._rows(self.y_train, idx, clients)
