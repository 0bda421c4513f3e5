"""Partitions of one pooled labelled dataset over clients, as Flower Datasets defines them
(``flwr_datasets.partitioner``): :func:`iid` (``IidPartitioner``: contiguous shards of the pool's
order), :func:`dirichlet` (``DirichletPartitioner``: each class split over the clients by proportions
drawn from ``Dirichlet(alpha)``, drawn again until every client holds ``min_size`` samples;
optionally self-balancing) and :func:`classes` (``PathologicalPartitioner``: each client a
fixed number of classes, each class split evenly over the clients that hold it).

Given the same labels and a ``numpy`` generator seeded as Flower's (``default_rng(seed)``), each
returns Flower's partitions, draw for draw. :func:`split_pool` is what a run calls: the pool
shuffled first (as ``FederatedDataset(shuffle=True)`` does), then partitioned, both from the run's
seed only (streams of ``SeedSequence([seed, stream])``), so any machine and any process layout
gets the same clients.
"""

from __future__ import annotations

import numpy as np

from ..spelling import setting
from ..warn import warn
from .base import (
    CLASS_ASSIGNMENTS,
    PARTITIONS,
    DataRequest,
    DatasetError,
    PartitionSpec,
    Pooled,
    RawClient,
    RawFederated,
)

#: Flower's ``min_partition_size`` default: the fewest samples a Dirichlet partition may leave a client.
MIN_SIZE = 10
#: Flower's draws of the Dirichlet proportions before it gives up (its ``sampling_try`` 0..10).
DRAWS = 11
_SHUFFLE_STREAM, _PARTITION_STREAM = 60, 61
#: What a partition splits, for refusals.
POOLED_HELP = "rmnist, hcifar10, or Python's data=(x, y)"
__all__ = [
    "CLASS_ASSIGNMENTS",
    "PARTITIONS",
    "PartitionSpec",
    "classes",
    "dirichlet",
    "from_pool",
    "iid",
    "pooled_clients",
    "split_pool",
]


def _rng(seed: int, stream: int) -> np.random.Generator:
    """A generator that depends only on (seed, stream)."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream]))


def iid(n: int, clients: int) -> list[np.ndarray]:
    """``IidPartitioner``: ``range(n)`` cut into ``clients`` contiguous shards (the first
    ``n % clients`` one sample longer, as ``datasets.Dataset.shard(contiguous=True)``)."""
    return [np.asarray(s, dtype=np.int64) for s in np.array_split(np.arange(n), clients)]


def dirichlet(
    labels: np.ndarray,
    clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_size: int = MIN_SIZE,
    self_balancing: bool = False,
) -> list[np.ndarray]:
    """``DirichletPartitioner`` (Yurochkin et al. 2019): per class in sorted order, proportions
    ``p ~ Dir(alpha 1)`` over the clients; with ``self_balancing`` (off, Flower's default) a client
    already holding more than ``n / clients`` samples gets none of this class (``p`` renormalised);
    the class's indices cut at
    ``floor(cumsum(p) n_k)``. Drawn again (up to :data:`DRAWS` times) until every client holds
    ``min_size``; each client's indices shuffled last."""
    alphas = np.full(clients, float(alpha))
    mean = len(labels) / clients
    for _ in range(DRAWS):
        parts: list[list[int]] = [[] for _ in range(clients)]
        for k in np.unique(labels):
            idx = np.nonzero(labels == k)[0]
            p = rng.dirichlet(alphas)
            if self_balancing:
                p = np.where([len(q) > mean for q in parts], 0.0, p)
                p = p / sum(p.tolist())  # (Flower sums in Python, left to right)
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts), strict=True):
                part.extend(chunk.tolist())
        if min(len(q) for q in parts) >= min_size:
            return _shuffled(parts, rng)
    raise DatasetError(
        f"{setting('partition', 'dirichlet')}: after {DRAWS} draws some client still holds fewer than "
        f"{min_size} of the {len(labels)} samples ({setting('clients', clients)}, "
        f"{setting('partition_alpha', alpha)}); give a larger partition_alpha or fewer clients"
    )


def assigned_classes(
    classes: np.ndarray, clients: int, per_client: int, mode: str, rng: np.random.Generator
) -> list[list[int]]:
    """Each client's classes (``PathologicalPartitioner``'s ``class_assignment_mode``):
    ``first-deterministic`` class ``i % K`` then random others, ``deterministic`` classes
    ``(i + j) % K``, ``random`` ``per_client`` distinct random classes."""
    k = len(classes)
    out: list[list[int]] = []
    for i in range(clients):
        if mode == "deterministic":
            out.append([int(classes[(i + j) % k]) for j in range(per_client)])
        elif mode == "random":
            out.append([int(c) for c in rng.choice(classes, size=per_client, replace=False)])
        else:
            mine = [int(classes[i % k])]
            while len(mine) < per_client:
                c = int(rng.choice(classes, size=1)[0])
                if c not in mine:
                    mine.append(c)
            out.append(mine)
    return out


def classes(
    labels: np.ndarray,
    clients: int,
    per_client: int,
    rng: np.random.Generator,
    mode: str = "first-deterministic",
) -> list[np.ndarray]:
    """``PathologicalPartitioner`` (Li et al. 2022): each client ``per_client`` classes
    (:func:`assigned_classes`); each class's indices split in order into as many near-equal parts
    (``np.array_split``) as clients hold it, given out in client order; each client's indices
    shuffled last. A class no client holds is left out (one warning)."""
    found = np.unique(labels)
    if per_client > len(found):
        raise DatasetError(
            f"{setting('classes_per_client', per_client)}: the data has {len(found)} classes; give "
            f"{setting('classes_per_client', len(found))} or fewer"
        )
    held = assigned_classes(found, clients, per_client, mode, rng)
    parts: list[list[int]] = [[] for _ in range(clients)]
    unused = []
    for c in found.tolist():
        holders = [i for i in range(clients) if c in held[i]]
        idx = np.flatnonzero(labels == c)
        if not holders:
            unused.append(c)
            continue
        if len(holders) > len(idx):
            raise DatasetError(
                f"{setting('partition', 'classes')}: class {c} has {len(idx)} samples for {len(holders)} "
                f"clients ({setting('clients', clients)}, {setting('classes_per_client', per_client)}); "
                "give fewer clients or fewer classes per client"
            )
        for i, chunk in zip(holders, np.array_split(idx, len(holders)), strict=True):
            parts[i].extend(chunk.tolist())
    if unused:
        warn(f"partition=classes: class(es) {unused} are held by no client and left out of the data")
    return _shuffled(parts, rng)


def _shuffled(parts: list[list[int]], rng: np.random.Generator) -> list[np.ndarray]:
    """Each part shuffled in place in client order (Flower's ``shuffle=True``), as index arrays."""
    for part in parts:
        rng.shuffle(part)
    return [np.asarray(p, dtype=np.int64) for p in parts]


def split_pool(labels: np.ndarray, spec: PartitionSpec, clients: int, seed: int) -> list[np.ndarray]:
    """Indices into the pool of each client's samples: the pool's order shuffled, then partitioned
    by ``spec``, from ``seed`` alone. Refuses (one line) a split leaving a client too few samples."""
    n = len(labels)
    floor = MIN_SIZE if spec.method == "dirichlet" else 2
    if n < clients * floor:
        raise DatasetError(
            f"{setting('partition', spec.method)}: {n} samples cannot give {clients} clients {floor} "
            f"each; give {setting('clients', max(n // floor, 2))} or fewer"
        )
    order = _rng(seed, _SHUFFLE_STREAM).permutation(n)
    y, rng = labels[order], _rng(seed, _PARTITION_STREAM)
    if spec.method == "iid":
        parts = iid(n, clients)
    elif spec.method == "dirichlet":
        parts = dirichlet(y, clients, spec.alpha, rng)
    elif spec.method == "classes":
        parts = classes(y, clients, spec.classes_per_client, rng, spec.class_assignment)
    else:
        raise DatasetError(f"partition = {spec.method!r}; allowed: {', '.join(PARTITIONS[1:])}")
    small = [i for i, p in enumerate(parts) if len(p) < 2]
    if small:
        raise DatasetError(
            f"{setting('partition', spec.method)}: client(s) {small[:5]} get fewer than 2 samples (a "
            f"train/test split needs 2); give fewer clients than {setting('clients', clients)}"
        )
    return [order[p] for p in parts]


def pooled_clients(
    name: str, labels: np.ndarray, request: DataRequest, default: int | None
) -> list[np.ndarray]:
    """Each client's indices into the pool ``labels`` of dataset ``name``: :func:`split_pool` over
    ``request.clients`` clients (``default`` when not given)."""
    clients = request.clients or default
    if clients is None:
        raise DatasetError(
            f"{name} is one pooled dataset: give the number of clients to split it over, e.g. "
            f"{setting('clients', 10)}"
        )
    return split_pool(labels, request.partition, clients, request.seed)


def from_pool(pool: Pooled, request: DataRequest) -> RawFederated:
    """The clients of a pooled dataset (:func:`pooled_clients`), each split by the protocol later
    (stratified 75/25, no reduction: the partition decides the sizes)."""
    method = request.partition.method
    if method == "none":
        raise DatasetError(
            f"{pool.name} is one pooled dataset (x, y): split it over the clients with "
            f"{setting('partition', 'dirichlet')}, {setting('partition', 'classes')} or "
            f"{setting('partition', 'iid')}, and {setting('clients', 10)}"
        )
    if pool.task == "regression" and method != "iid":
        raise DatasetError(
            f"{setting('partition', method)} splits by class labels, but {pool.name} holds regression "
            f"targets (floating-point y); give {setting('partition', 'iid')}, or integer class ids"
        )
    parts = pooled_clients(pool.name, pool.y, request, None)
    clients = tuple(RawClient(pool.x[idx], pool.y[idx]) for idx in parts)
    return RawFederated(pool.name, pool.task, pool.num_classes, clients, reduce=False)
