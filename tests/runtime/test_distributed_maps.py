"""Map modes for clients of different architectures split over Gloo processes: ``maps = proxy`` and
``maps = functional`` on 2 and 3 ranks against one process (thetas, per-client metrics, rows, bits,
FLOPs), with faults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .test_distributed import TINY, _compare


@pytest.mark.parametrize("processes", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_processes_match_one_proxy_maps_between_three_cnns_with_faults(
    tmp_path: Path, processes: int
) -> None:
    """A rank builds the coupling of proxies it does not hold; the proxies start from the same draw
    whichever rank holds them; lost messages and clients sitting out agree across ranks."""
    rng = np.random.default_rng(0)
    images = {"num_clients": np.int64(6)}
    for i in range(6):
        images[f"x_{i}"] = rng.normal(size=(24, 1, 12, 12)).astype(np.float32)
        images[f"y_{i}"] = rng.integers(0, 3, 24)
    np.savez(tmp_path / "images.npz", **images)
    settings = {
        "dataset": f"file:{tmp_path / 'images.npz'}",
        "model": "cnn-small,cnn-medium,cnn-large",
        "maps": "proxy",
        "lam": 0.5,
        "batch_size": 8,
        "drop_prob": 0.1,
        "link_drop_prob": 0.2,
        **{k: v for k, v in TINY.items() if k != "clients" and not k.startswith("data.")},
    }
    _compare(tmp_path, settings, processes)


@pytest.mark.parametrize("processes", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_processes_match_one_functional_maps_of_clients_that_see_different_features(
    tmp_path: Path, processes: int
) -> None:
    """Every rank draws the probes of its half-edges from (seed, edge, round); tabular clients of
    different widths take their columns of one probe; faults agree across ranks."""
    settings = {
        "dataset": "synthetic-clusters",
        "maps": "functional",
        "lam": 0.3,
        "probe_size": 6,
        "local_epochs": 1,
        "batch_size": 8,
        "drop_prob": 0.1,
        "link_drop_prob": 0.2,
        **TINY,
    }
    _compare(tmp_path, settings, processes)
