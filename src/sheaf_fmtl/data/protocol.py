"""The paper's data protocol (Section 5, "Evaluation"): per-client 75/25 split, stratified for
classification; half of the clients keep 20% of their training data; features standardised with
training statistics only. Everything depends only on ``seed`` and each client's global id (a shard's
read gives its clients the numbers they have in the whole federation). A dataset may turn the reduction
off (``RawFederated.reduce``, user data's ``reduce=false``). Classification clients whose training
labels are all one class are legal, and named in one warning (not for generated data)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import cast

import numpy as np

from ..warn import user_stacklevel
from .base import ClientSplit, DatasetError, FederatedDataset, RawClient, RawFederated


@dataclass(frozen=True)
class ProtocolOptions:
    train_fraction: float = 0.75
    reduced_clients_fraction: float = 0.5  # "half of the clients"
    reduced_keep: float = 0.2  # "... keep only 20% of their training data"
    standardize: bool = True
    validation: float = 0.0  # > 0: this fraction of each client's training data replaces its test split
    #: with ``validation > 0``: keep the test split (the training data and their standardisation stay
    #: the validated run's, the validation split held out): how its models are scored on test data
    keep_test: bool = False


def _rng(seed: int, *stream: int) -> np.random.Generator:
    """A generator that depends only on (seed, stream): the same partition on any machine."""
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


def train_test_indices(
    y: np.ndarray, train_fraction: float, stratify: bool, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``range(len(y))`` into train/test; per class when ``stratify`` (at least one test
    sample per class that has two or more samples)."""
    n = len(y)
    if not stratify:
        perm = rng.permutation(n)
        n_train = int(round(train_fraction * n))
        n_train = min(max(n_train, 1), n - 1) if n > 1 else n
        return np.sort(perm[:n_train]), np.sort(perm[n_train:])
    train, test = [], []
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        idx = idx[rng.permutation(len(idx))]
        k = int(round(train_fraction * len(idx)))
        if len(idx) > 1:
            k = min(max(k, 1), len(idx) - 1)
        train.append(idx[:k])
        test.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def subsample(y: np.ndarray, keep: float, stratify: bool, rng: np.random.Generator) -> np.ndarray:
    """Indices of a ``keep`` fraction of ``y`` (at least one sample; per class when stratified)."""
    if not stratify:
        k = max(1, int(round(keep * len(y))))
        return np.sort(rng.permutation(len(y))[:k])
    kept = []
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        k = max(1, int(round(keep * len(idx))))
        kept.append(idx[rng.permutation(len(idx))[:k]])
    return np.sort(np.concatenate(kept))


def standardization(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of the training features (``[1, *feature_shape]``; a constant feature's
    std is 1): what :func:`standardize` applies, kept in the run folder (``preprocessing.json``)."""
    mean = x_train.mean(axis=0, keepdims=True)
    std = x_train.std(axis=0, keepdims=True)
    return mean, np.where(std > 1e-12, std, 1.0).astype(mean.dtype)


def standardize(x: np.ndarray, stats: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``(x - mean) / std`` in float32."""
    mean, std = stats
    return cast("np.ndarray", ((x - mean) / std).astype(np.float32))


def apply_protocol(raw: RawFederated, seed: int, options: ProtocolOptions | None = None) -> FederatedDataset:
    """Split every client of ``raw`` by the paper's protocol (deterministic in ``seed``)."""
    options = options or ProtocolOptions()
    if not 0.0 < options.train_fraction < 1.0:
        raise DatasetError(f"train_fraction must be in (0, 1), got {options.train_fraction}")
    if not 0.0 <= options.validation < 1.0:
        raise DatasetError(f"validation must be in [0, 1), got {options.validation}")
    stratify = raw.task == "classification"
    ids = raw.ids if raw.ids is not None else tuple(range(len(raw.clients)))  # global ids: the streams
    n_clients = raw.total if raw.total is not None else len(raw.clients)
    n_reduced = int(round(options.reduced_clients_fraction * n_clients)) if raw.reduce else 0
    reduced = set(_rng(seed, 1).permutation(n_clients)[:n_reduced].tolist())
    out, stats = [], []
    for i, client in zip(ids, raw.clients, strict=True):
        _check_finite(raw.name, i, client)
        rng = _rng(seed, 2, i)
        if client.x_test is not None and client.y_test is not None:
            x_tr, y_tr, x_te, y_te = client.x, client.y, client.x_test, client.y_test
        else:
            tr, te = train_test_indices(client.y, options.train_fraction, stratify, rng)
            x_tr, y_tr, x_te, y_te = client.x[tr], client.y[tr], client.x[te], client.y[te]
        if i in reduced:
            keep = subsample(y_tr, options.reduced_keep, stratify, rng)
            x_tr, y_tr = x_tr[keep], y_tr[keep]
        if options.validation > 0:  # tuning (sweep): held out of the training data, test data unused
            tr, va = train_test_indices(y_tr, 1.0 - options.validation, stratify, _rng(seed, 3, i))
            x_va, y_va, x_tr, y_tr = x_tr[va], y_tr[va], x_tr[tr], y_tr[tr]
            if not options.keep_test:
                x_te, y_te = x_va, y_va
        x_tr = np.asarray(x_tr, dtype=np.float32)
        x_te = np.asarray(x_te, dtype=np.float32)
        if options.standardize:
            stats.append(standardization(x_tr))
            x_tr, x_te = standardize(x_tr, stats[-1]), standardize(x_te, stats[-1])
        ydtype = np.int64 if stratify else np.float32
        out.append(ClientSplit(x_tr, np.asarray(y_tr, ydtype), x_te, np.asarray(y_te, ydtype)))
    if stratify and not raw.generated:
        _warn_single_class(raw.name, out, ids)
    kept = tuple(stats) if options.standardize else None
    return FederatedDataset(
        raw.name, raw.task, raw.num_classes, tuple(out), raw.features, standardization=kept, ids=raw.ids
    )


def single_class_clients(clients: tuple[ClientSplit, ...] | list[ClientSplit]) -> list[int]:
    """Ids of the clients whose training labels are all one class (or that have none)."""
    return [i for i, c in enumerate(clients) if len(np.unique(c.y_train)) < 2]


def _warn_single_class(name: str, clients: list[ClientSplit], global_ids: tuple[int, ...]) -> None:
    ids = [global_ids[i] for i in single_class_clients(clients)]
    if ids:
        warnings.warn(
            f"{name}: the training labels of client(s) {ids} are all one class (legal, but such "
            "a client's own data cannot teach its model to tell the classes apart)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )


def reduced_clients(num_clients: int, seed: int, fraction: float = 0.5) -> list[int]:
    """Which clients keep only part of their training data (same rule as :func:`apply_protocol`)."""
    n = int(round(fraction * num_clients))
    return sorted(_rng(seed, 1).permutation(num_clients)[:n].tolist())


def _check_finite(name: str, i: int, client: RawClient) -> None:
    if len(client.x) != len(client.y):
        raise DatasetError(f"{name}: client {i} has {len(client.x)} feature rows but {len(client.y)} targets")
    if len(client.y) < 2 and client.x_test is None:
        raise DatasetError(f"{name}: client {i} has {len(client.y)} samples; at least 2 are needed to split")
    if not np.all(np.isfinite(client.x)):
        raise DatasetError(f"{name}: client {i} has NaN or infinite features")
    if not np.all(np.isfinite(client.y)):
        raise DatasetError(f"{name}: client {i} has NaN or infinite targets")
