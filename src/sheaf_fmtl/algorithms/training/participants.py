"""The local step of a round's participants alone (client sampling, ``clients_per_round``).

A client not drawn this round keeps its state (the runtime puts its rows back,
``runtime/engine/faults.py``); rather than train it and throw the result away, :func:`on_participants`
runs an algorithm's local update on a federation of the participants held here: their rows of the
one cohort (data, models, optimizer state), their own batch streams, the run's steps per epoch. A
participant's batches and steps are those it takes in the whole federation, and a round costs in
proportion to the participants. Cohorts with BatchNorm statistics keep the whole federation's step
(their statistics are per client on the cohort; the non-participants' are put back).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import torch

from ..protocol.algorithm import Context, State

if TYPE_CHECKING:
    from ...federation import Cohort, Cohorts

S = TypeVar("S", bound=State)


def participant_rows(ctx: Context) -> np.ndarray | None:
    """Rows of the one cohort held here that take part this round (``None``: train every row)."""
    out = ctx.left_out
    fed = ctx.fed
    if out is None or len(fed.cohorts) != 1 or fed.cohorts[0].norms is not None:
        return None
    rows: np.ndarray = np.flatnonzero(~out[fed.cohorts[0].clients])
    return rows


def sub_cohort(cohort: Cohort, rows: np.ndarray) -> Cohort:
    """``cohort`` restricted to ``rows`` (its model and objective shared, its data copied)."""
    sub = copy.copy(cohort)
    idx = torch.as_tensor(rows, dtype=torch.long, device=cohort.device)
    sub.train, sub.test = cohort.train.select(idx), cohort.test.select(idx)
    sub.clients = cohort.clients[rows]
    sub._client_ids = [int(c) for c in sub.clients]
    sub._epoch_static, sub._key_slots, sub._padded = {}, {}, {}
    sub._eval_rows = None
    if cohort.device.type == "cuda":
        sub.group = sub.size
    return sub


def sub_federation(fed: Cohorts, rows: np.ndarray) -> Cohorts:
    """The federation of ``rows`` of its one cohort: the same streams and global sizes."""
    sub = copy.copy(fed)
    cohort = sub_cohort(fed.cohorts[0], rows)
    sub.cohorts = [cohort]
    sub.cohort_of = np.full(fed.num_clients, -1, np.int64)
    sub.cohort_of[cohort.clients] = 0
    sub.position = np.full(fed.num_clients, -1, np.int64)
    sub.position[cohort.clients] = np.arange(len(rows))
    sub._index, sub._single = {}, None
    return sub


def on_participants(
    state: S, ctx: Context, update: Callable[[S, Context], S], extra: Sequence[str] = ()
) -> S:
    """``update(state, ctx)`` on this round's participants alone (:func:`participant_rows`; every
    row when there is no sampling); the other rows of ``state.client_rows`` and ``extra`` fields
    stay as they were. With ``local_epochs``, a round's participants start a fresh pass over their
    data (the walk of one round's participants, not carried into the next round's)."""
    rows = participant_rows(ctx)
    if rows is None:
        return update(state, ctx)
    names = (*state.client_rows, *extra)
    size = ctx.fed.cohorts[0].size
    idx = torch.as_tensor(rows, dtype=torch.long)
    sub_state = copy.copy(state)
    sliced = {name: _rows_of(getattr(state, name), idx) for name in names}
    for name, rows_now in sliced.items():
        setattr(sub_state, name, rows_now)
    sub_ctx = dataclasses.replace(
        ctx, fed=sub_federation(ctx.fed, rows), _plans=[], _cursor=0, last_batches=[]
    )
    sub_ctx.static_epoch = None  # its compiled steps and masks are the whole cohort's
    done = update(sub_state, sub_ctx)
    memo: dict[int, torch.Tensor] = {}  # one merge per tensor (FedAvg's thetas are its global copies)
    for name in names:
        new = getattr(done, name)
        if new is sliced[name]:  # untouched by the update (e.g. the round's anchor)
            setattr(done, name, getattr(state, name))
            continue
        setattr(done, name, _merged(getattr(state, name), new, idx, size, memo))
    return done


def _rows_of(value: object, idx: torch.Tensor) -> object:
    """Rows ``idx`` of a per-client field (one stack, a list of per-cohort stacks, empty or None)."""
    if isinstance(value, torch.Tensor):
        return value.index_select(0, idx.to(value.device))
    if isinstance(value, list):
        return [_rows_of(v, idx) for v in value]
    return value


def _merged(old: object, new: object, idx: torch.Tensor, size: int, memo: dict[int, torch.Tensor]) -> object:
    """``old`` with rows ``idx`` replaced by ``new``; a field the update created (the optimizer's
    first state) is zero on the other ``size - len(idx)`` rows. ``memo``: the merges made so far."""
    if isinstance(new, list):
        olds = old if isinstance(old, list) and old else [None] * len(new)
        return [_merged(o, n, idx, size, memo) for o, n in zip(olds, new, strict=True)]
    if not isinstance(new, torch.Tensor):
        return new
    if id(new) not in memo:
        base = old if isinstance(old, torch.Tensor) else new.new_zeros((size, *new.shape[1:]))
        memo[id(new)] = base.index_copy(0, idx.to(base.device), new)
    return memo[id(new)]
