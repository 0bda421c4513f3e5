"""Federated datasets: per-client arrays before and after the paper's split protocol, what a run
asks of a dataset (:class:`DataRequest`) and the table of readers (:func:`register`).

The bottom of the data layer: readers (``har``, ``images``, ``mocha``, ``school``, ``synthetic``,
``user``) import this module, ``files``, ``options`` and ``partition`` (itself on this module) only;
``registry`` imports the readers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..component_keys import Keys, declare_keys, key

Task = Literal["classification", "regression"]


class DatasetError(ValueError):
    """A dataset could not be found, read or validated (the message names file and problem)."""


@dataclass(frozen=True)
class RawClient:
    """All samples of one client before the train/test split.

    ``x``: ``[n, *feature_shape]`` float; ``y``: ``[n]`` int64 labels (classification) or float targets.
    ``x_test``/``y_test`` are set only when the source fixes its own test split.
    """

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None


@dataclass(frozen=True)
class RawFederated:
    """A federated dataset as read from disk or generated: one :class:`RawClient` per client."""

    name: str
    task: Task
    num_classes: int  # 0 for regression
    clients: tuple[RawClient, ...]
    reduce: bool = True  # the protocol's "half of the clients keep 20%" (user data may turn it off)
    generated: bool = False  # made up by a built-in generator: no single-class warning (data.protocol)
    # Per client: the ids, in one shared feature space, of its feature columns, in column order
    # (``None``: unknown). What ``maps=features`` couples (algorithms/maps/coordinates.py).
    features: tuple[np.ndarray, ...] | None = None
    # A shard's read (``DataRequest.held``): the global ids of ``clients`` and the federation's
    # number of clients N (``None``: ``clients`` is every client, ids ``0..N-1``).
    ids: tuple[int, ...] | None = None
    total: int | None = None


@dataclass(frozen=True)
class Pooled:
    """One labelled dataset that a partition splits over the clients (Python ``data=(x, y)``):
    ``x`` ``[n, *feature_shape]`` float32, ``y`` ``[n]`` int64 class ids or float32 targets."""

    name: str
    task: Task
    num_classes: int  # 0 for regression
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class ClientSplit:
    """One client's train and test arrays after the protocol (``x``: ``[n, *feature_shape]``)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class FederatedDataset:
    """What a run consumes: per-client splits; feature shapes may differ between clients."""

    name: str
    task: Task
    num_classes: int
    clients: tuple[ClientSplit, ...]
    features: tuple[np.ndarray, ...] | None = None  # per client, see RawFederated.features
    loss: str = (
        "auto"  # the config's key: auto (the task's), module:function or a Python object's placeholder
    )
    metric: str = "auto"  # likewise: auto (accuracy / MSE) or the user's metric
    # Per client: the (mean, std) its features were standardised with (``[1, *feature_shape]``
    # each, from its training data), ``None`` for a client left as read; ``None``: none at all.
    standardization: tuple[tuple[np.ndarray, np.ndarray] | None, ...] | None = None
    # A shard's read: the global ids of ``clients`` (``None``: every client, in order).
    ids: tuple[int, ...] | None = None
    # Every client's training-set size n_i where ``clients`` hold empty arrays for the clients read
    # elsewhere (the start-up numbers, :mod:`.census`); ``None``: the arrays' own lengths.
    train_sizes: tuple[int, ...] | None = None
    # Per client: whether its data were read in this process (``None``: all were).
    local: tuple[bool, ...] | None = None

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def feature_shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.clients[i].x_train.shape[1:])


#: The values of config key ``partition``: ``none`` keeps each dataset's own clients.
PARTITIONS = ("none", "dirichlet", "classes", "iid")
#: The values of config key ``class_assignment`` (Flower's ``class_assignment_mode``).
CLASS_ASSIGNMENTS = ("first-deterministic", "random", "deterministic")


@dataclass(frozen=True)
class PartitionSpec:
    """How a pooled dataset is split over clients (config keys ``partition``, ``partition_alpha``,
    ``classes_per_client``, ``class_assignment``)."""

    method: str = "none"
    alpha: float = 0.5
    classes_per_client: int = 2
    class_assignment: str = "first-deterministic"

    @classmethod
    def of(cls, config: object) -> PartitionSpec:
        """The spec a run config (or anything with the same attributes) sets."""
        return cls(
            str(getattr(config, "partition", "none")),
            float(getattr(config, "partition_alpha", 0.5)),
            int(getattr(config, "classes_per_client", 2)),
            str(getattr(config, "class_assignment", "first-deterministic")),
        )

    def describe(self) -> str:
        """``dirichlet (partition_alpha=0.3)``: the method and the keys it reads."""
        if self.method == "dirichlet":
            return f"dirichlet (partition_alpha={self.alpha:g})"
        if self.method == "classes":
            return f"classes (classes_per_client={self.classes_per_client}, {self.class_assignment})"
        return self.method


@dataclass(frozen=True)
class DataRequest:
    """What a run asks of a dataset."""

    clients: int | None = None  # None: the dataset's own number of clients
    seed: int = 0
    data_dir: Path | None = None  # given: the only folder searched, unless data_search
    data_search: bool = False  # with data_dir: also search $SHEAF_FMTL_DATA, then the user data folder
    options: Mapping[str, Any] = field(default_factory=dict)  # dataset-specific knobs
    partition: PartitionSpec = PartitionSpec()  # a pooled dataset's split over clients (.partition)
    # The global ids (ascending) this process holds: a reader that can read only those clients reads
    # only those (a ``module:function`` taking ``clients=``, a folder of per-client files); with
    # ``clients`` (N) set. ``None``: every client.
    held: tuple[int, ...] | None = None


Builder = Callable[[DataRequest], RawFederated]


@dataclass(frozen=True)
class Reader:
    """A registered dataset: its builder and the files that make it available (any one suffices;
    empty for generated data)."""

    build: Builder
    files: tuple[str, ...] = ()
    pooled: bool = False  # built from one pool: its builder applies the request's partition


READERS: dict[str, Reader] = {}


def register(name: str, files: tuple[str, ...] = (), pooled: bool = False) -> Callable[[Builder], Builder]:
    """Decorator registering ``builder(request) -> RawFederated`` as dataset ``name``.

    Args:
        name: the dataset's name (``dataset=NAME``).
        files: paths, relative to a data folder, any one of which makes the dataset available
            (what ``sheaf-fmtl data list`` looks for); none for generated data.
        pooled: the builder reads one pooled dataset and splits it by ``request.partition`` when
            that is not ``none`` (:mod:`.partition`); other datasets refuse a partition.
    """

    if not isinstance(name, str) or not name or any(c.isspace() or c in ",=" for c in name):
        raise ValueError(f"dataset name {name!r}: give a non-empty name without spaces, ',' or '='")
    if name in READERS:
        raise ValueError(f"dataset '{name}' is registered already; give another name")
    if isinstance(files, str) or not all(isinstance(f, str) for f in files):
        raise ValueError(f"dataset '{name}': files = {files!r:.60}; give a tuple of paths")

    def deco(fn: Builder) -> Builder:
        if not callable(fn) or isinstance(fn, type):
            raise ValueError(f"dataset '{name}': register a function request -> data, not {fn!r:.60}")
        READERS[name] = Reader(fn, tuple(files), pooled)
        return fn

    return deco


@declare_keys("partition", selector="partition")
@dataclass(frozen=True)
class PartitionKeys(Keys):
    """The partitioners' own keys (``partition`` picks one)."""

    partition_alpha: float = key(
        0.5,
        "`partition=dirichlet`: concentration `alpha` (small: few classes a client; large: near IID).",
        rule="partition_alpha > 0",
        readers=("dirichlet",),
    )
    classes_per_client: int = key(
        2,
        "`partition=classes`: the number of classes each client holds.",
        rule="classes_per_client >= 1",
        readers=("classes",),
    )
    class_assignment: str = key(
        "first-deterministic",
        "`partition=classes`: which classes a client holds: `first-deterministic` (client `i` holds class "
        "`i mod K`, the others drawn; every class used when `clients >= K`), `random`, or `deterministic` "
        "(classes `i, i+1, ...` mod K), as Flower's `class_assignment_mode`.",
        choices=CLASS_ASSIGNMENTS,
        readers=("classes",),
    )
