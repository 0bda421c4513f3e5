"""Shared fixtures: small problems built in memory (no files needed)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
import torch

import sheaf_fmtl.algorithms  # noqa: F401 - the tests read configs directly: fill the registries as entry points do
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset

#: Threads a test's process may use: two, or one per worker where pytest-xdist runs workers side by side.
TEST_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads())
torch.set_num_threads(TEST_THREADS)


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


@pytest.fixture(autouse=True, scope="session")
def empty_user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The per-user data folder of every test is an empty one (never the real ``~/.local/share``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
        yield


#: Why a test that needs the real datasets is skipped.
NO_DATA = "the real datasets are found through $SHEAF_FMTL_DATA, which is not set"


def shared_data_dir() -> str | None:
    """The real datasets' folder, ``$SHEAF_FMTL_DATA`` (``.ci/run`` sets it), or ``None``."""
    cand = os.environ.get("SHEAF_FMTL_DATA")
    return cand if cand and os.path.isdir(cand) else None
