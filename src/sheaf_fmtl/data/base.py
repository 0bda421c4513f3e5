"""Federated datasets: per-client arrays before and after the paper's split protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

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

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def feature_shape(self, i: int) -> tuple[int, ...]:
        return tuple(self.clients[i].x_train.shape[1:])
