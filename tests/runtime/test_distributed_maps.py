"""Map modes for clients of different architectures split over Gloo processes: ``maps = proxy`` and
``maps = functional`` on 2 and 3 ranks against one process (thetas, per-client metrics, rows, bits,
FLOPs), with faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_distributed import TINY, _compare, three_cnns


@pytest.mark.slow  # (three CNNs over processes: make test-slow, CI's second step)
@pytest.mark.parametrize("processes", [2, 3])
def test_processes_match_one_proxy_maps_between_three_cnns_with_faults(
    tmp_path: Path, processes: int
) -> None:
    """A rank builds the coupling of proxies it does not hold; the proxies start from the same draw
    whichever rank holds them; lost messages and clients sitting out agree across ranks."""
    settings = {**three_cnns(tmp_path), "maps": "proxy", "drop_prob": 0.1, "link_drop_prob": 0.2}
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
