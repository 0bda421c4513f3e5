"""Our partitioners against Flower Datasets' own (``flwr_datasets.partitioner``), on the same labels
and seed: the same clients, sample for sample. Skipped unless ``flwr-datasets`` is installed (it pulls
Hugging Face ``datasets`` and ``pyarrow``; ``pip install flwr-datasets`` to run it)."""

from __future__ import annotations

import numpy as np
import pytest

from sheaf_fmtl.data.partition import classes, dirichlet, iid

partitioner = pytest.importorskip(
    "flwr_datasets.partitioner", reason="flwr-datasets is not installed (pip install flwr-datasets)"
)
datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed")


def _flower(part: object, y: np.ndarray) -> list[list[int]]:
    """Each Flower partition's sample ids (an ``idx`` column beside the labels)."""
    part.dataset = datasets.Dataset.from_dict({"idx": np.arange(len(y)), "label": y})
    return [list(part.load_partition(i)["idx"]) for i in range(part.num_partitions)]


@pytest.mark.parametrize(
    ("alpha", "clients", "balance"), [(0.1, 10, False), (0.5, 20, False), (10.0, 7, True)]
)
def test_dirichlet_equals_flowers_dirichlet_partitioner(alpha: float, clients: int, balance: bool) -> None:
    y = np.random.default_rng(1).integers(0, 10, 3000)
    part = partitioner.DirichletPartitioner(clients, "label", alpha, self_balancing=balance, seed=5)
    theirs = _flower(part, y)
    ours = dirichlet(y, clients, alpha, np.random.default_rng(5), self_balancing=balance)
    assert [p.tolist() for p in ours] == theirs


@pytest.mark.parametrize("mode", ["first-deterministic", "random", "deterministic"])
def test_classes_equals_flowers_pathological_partitioner(mode: str) -> None:
    y = np.random.default_rng(2).integers(0, 10, 3000)
    theirs = _flower(partitioner.PathologicalPartitioner(25, "label", 2, mode, seed=9), y)
    ours = classes(y, 25, 2, np.random.default_rng(9), mode)
    assert [p.tolist() for p in ours] == theirs


def test_iid_equals_flowers_iid_partitioner() -> None:
    y = np.random.default_rng(3).integers(0, 10, 1001)
    theirs = _flower(partitioner.IidPartitioner(9), y)
    assert [p.tolist() for p in iid(len(y), 9)] == theirs
