"""The start-up numbers of a federation read in silos: each process reads only the clients it holds
(``DataRequest.held``) and tells the others, once, what they need to know of them, as numbers:

- per client: its global id, feature shape, number of training samples, and the ids of its
  feature columns where the dataset names them (what ``maps=features`` couples);
- per process: the dataset's name, the task and the number of classes its labels show.

Never data: no sample, label, per-sample value or statistic (standardisation stays with the client).
:func:`merge` checks that the processes agree and :func:`placeholder` gives each process the whole
federation's dataset, with empty arrays of the right shapes for the clients read elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spelling import setting
from .base import ClientSplit, DatasetError, FederatedDataset


@dataclass(frozen=True)
class Census:
    """What one process tells the others (plain Python numbers and strings, :meth:`as_dict`)."""

    name: str
    task: str
    num_classes: int
    ids: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    n_train: tuple[int, ...]
    features: tuple[tuple[int, ...], ...] | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def census(local: FederatedDataset) -> Census:
    """The numbers of ``local`` (a shard's read: its ``ids`` in order)."""
    ids = local.ids if local.ids is not None else tuple(range(local.num_clients))
    features = None if local.features is None else tuple(tuple(int(v) for v in f) for f in local.features)
    return Census(
        local.name,
        local.task,
        int(local.num_classes),
        tuple(int(i) for i in ids),
        tuple(tuple(int(s) for s in c.x_train.shape[1:]) for c in local.clients),
        tuple(len(c.y_train) for c in local.clients),
        features,
    )


def merge(parts: Sequence[Census], total: int) -> Census:
    """The federation's census from every process's, in client order (:class:`DatasetError` when the
    processes disagree on the task, or the ids do not cover ``0..total-1`` once each)."""
    tasks = sorted({p.task for p in parts})
    if len(tasks) > 1:
        raise DatasetError(
            f"the processes' data show different tasks ({', '.join(tasks)}); give every silo the same kind "
            f"of targets, or {setting('data.task', tasks[0])}"
        )
    ids = [i for p in parts for i in p.ids]
    if sorted(ids) != list(range(total)):
        raise DatasetError(
            f"the processes read clients {sorted(ids)[:10]}... , not each of 0..{total - 1} once"
        )
    order = np.argsort(ids, kind="stable")

    def flat(field: str) -> tuple[Any, ...]:
        values = [v for p in parts for v in getattr(p, field)]
        return tuple(values[k] for k in order)

    named = [p.features is not None for p in parts]
    if any(named) and not all(named):
        raise DatasetError("some processes' data name their feature columns (features_i) and others not")
    return Census(
        parts[0].name,
        tasks[0],
        max(p.num_classes for p in parts),  # the labels of every silo: the largest id any shows
        tuple(range(total)),
        flat("shapes"),
        flat("n_train"),
        flat("features") if all(named) else None,
    )


def placeholder(local: FederatedDataset, whole: Census) -> FederatedDataset:
    """The whole federation as one process sees it: ``local``'s clients at their ids, empty arrays of
    the census's shapes for the others; every client's training-set size from the census."""
    ids = local.ids if local.ids is not None else tuple(range(local.num_clients))
    mine = dict(zip(ids, range(len(ids)), strict=True))
    xdt = np.float32
    ydt = np.int64 if whole.task == "classification" else np.float32
    clients, stats = [], []
    for i, shape in enumerate(whole.shapes):
        if i in mine:
            clients.append(local.clients[mine[i]])
            stats.append(None if local.standardization is None else local.standardization[mine[i]])
            continue
        x, y = np.empty((0, *shape), xdt), np.empty((0,), ydt)
        clients.append(ClientSplit(x, y, x, y))
        stats.append(None)
    features = None if whole.features is None else tuple(np.asarray(f, np.int64) for f in whole.features)
    return dataclasses.replace(
        local,
        task=whole.task,  # type: ignore[arg-type]  # checked by merge: the processes' one task
        num_classes=whole.num_classes,
        clients=tuple(clients),
        features=features,
        standardization=tuple(stats) if local.standardization is not None else None,
        ids=None,
        train_sizes=whole.n_train,
        local=tuple(i in mine for i in range(len(whole.shapes))),
    )
