"""Shared fixtures: small problems built in memory (no files needed)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from sheaf_fmtl.data.base import ClientSplit, FederatedDataset

torch.set_num_threads(min(2, torch.get_num_threads()))


def make_dataset(
    dims: list[int], *, task: str = "classification", classes: int = 3, n: int = 12, seed: int = 0
) -> FederatedDataset:
    """Clients with ``dims[i]`` features each (so model sizes differ), random data."""
    rng = np.random.default_rng(seed)
    clients = []
    for d in dims:
        x = rng.normal(size=(n, d)).astype(np.float32)
        xt = rng.normal(size=(n // 2, d)).astype(np.float32)
        if task == "classification":
            y, yt = rng.integers(0, classes, n), rng.integers(0, classes, n // 2)
        else:
            y, yt = rng.normal(size=n).astype(np.float32), rng.normal(size=n // 2).astype(np.float32)
        clients.append(ClientSplit(x, y, xt, yt))
    return FederatedDataset("toy", task, classes if task == "classification" else 0, tuple(clients))


@pytest.fixture
def toy_dataset() -> FederatedDataset:
    return make_dataset([3, 5, 3, 4, 5, 3])


def shared_data_dir() -> str | None:
    for cand in (os.environ.get("SHEAF_FMTL_DATA"), "../shared/data", "/work/shared/data"):
        if cand and os.path.isdir(cand):
            return cand
    return None
