"""Map modes for clients of different architectures split over Gloo processes: ``maps = proxy``
on 2 and 3 ranks against one process (thetas, per-client metrics, rows, bits, FLOPs), with faults."""

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
