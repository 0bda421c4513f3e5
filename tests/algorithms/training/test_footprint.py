"""Memory known before allocation: the maps' and estimates' bytes from the layout (against what is
then allocated and a hand count), and a run that would not fit a (fake, small) free memory refused
in one line before anything is drawn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.algorithms.maps import learned as sheaf_fmtl
from sheaf_fmtl.algorithms.training import footprint
from sheaf_fmtl.cli import main
from sheaf_fmtl.config import ConfigError
from tests._baselines_problems import federation, regression_dataset, simulation
from tests.algorithms.maps.test_weighted_maps import EDGES, UNWEIGHTED


def _fed():  # noqa: ANN202
    return federation(regression_dataset(sizes=(9, 12, 10, 7), features=(3, 5, 3, 4)))


def _hand_count(gamma: float, element_size: int) -> int:
    """``sum`` over half-edges ``i -> j`` of ``d_ij x d_i`` (linear models: ``d_i = features + 1``)."""
    d = np.array([4, 6, 4, 5])
    total = 0
    for i, j in EDGES.tolist():
        d_ij = max(1, int(np.floor(gamma * min(d[i], d[j]))))
        total += d_ij * (d[i] + d[j])
    return total * element_size


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("bfloat16", 2), ("float64", 8)])
def test_map_bytes_known_before_allocation_equal_the_maps_drawn(dtype: str, size: int) -> None:
    sim = simulation("sheaf-fmtl", _fed(), UNWEIGHTED, gamma=0.6, map_dtype=dtype)
    drawn = sum(p.numel() * p.element_size() for p in sim.state.maps)
    assert drawn == _hand_count(0.6, size) == sim.state.layout.map_bytes(size)


def test_maps_that_do_not_fit_are_refused_before_they_are_drawn(monkeypatch) -> None:  # noqa: ANN001
    need = _hand_count(0.6, 4)

    def no_draw(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("maps drawn before the memory check")

    monkeypatch.setattr(footprint, "free_bytes", lambda device: need - 1)
    monkeypatch.setattr(sheaf_fmtl, "init_maps", no_draw)
    with pytest.raises(ConfigError) as info:
        simulation("sheaf-fmtl", _fed(), UNWEIGHTED, gamma=0.6)
    message = str(info.value)
    assert "\n" not in message
    assert f"need {need / 1e6:.3g} MB" in message and "the host has" in message
    assert "lower gamma" in message and "map_dtype=bfloat16" in message and "maps=redrawn" in message
    monkeypatch.setattr(footprint, "free_bytes", lambda device: need // 2 - 1)
    with pytest.raises(ConfigError, match="map_dtype=bfloat16\\)"):  # already halved: not advised
        simulation("sheaf-fmtl", _fed(), UNWEIGHTED, gamma=0.6, map_dtype="bfloat16")


def test_maps_that_just_fit_are_accepted(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(footprint, "free_bytes", lambda device: _hand_count(0.6, 4))
    simulation("sheaf-fmtl", _fed(), UNWEIGHTED, gamma=0.6)


def test_estimates_that_do_not_fit_are_refused(monkeypatch) -> None:  # noqa: ANN001
    fed = federation(regression_dataset(sizes=(9, 12, 10, 7), features=4))
    need = 2 * 2 * len(EDGES) * 5 * 4  # two [d_i] float32 copies (the edge's) per half-edge
    monkeypatch.setattr(footprint, "free_bytes", lambda device: need - 1)
    with pytest.raises(ConfigError, match=f"estimates .* need {need / 1e6:.3g} MB.*estimates=false"):
        simulation("sheaf-fmtl", fed, UNWEIGHTED, maps="redrawn", estimates=True)
    simulation("sheaf-fmtl", fed, UNWEIGHTED, maps="redrawn")  # no copies, nothing to refuse
    monkeypatch.setattr(footprint, "free_bytes", lambda device: need)
    simulation("sheaf-fmtl", fed, UNWEIGHTED, maps="redrawn", estimates=True)


def test_free_memory_reads_meminfo_and_unknown_skips_the_check(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    1234 kB\n")
    monkeypatch.setattr(footprint, "MEMINFO", meminfo)
    assert footprint.free_bytes("cpu") == 1234 * 1024
    monkeypatch.setattr(footprint, "MEMINFO", tmp_path / "absent")
    assert footprint.free_bytes("cpu") is None
    footprint.require_fits(10**30, "anything", "cpu", "")  # unknown: no refusal


def test_cli_refuses_maps_that_do_not_fit_in_one_line_and_writes_nothing(
    tmp_path: Path,
    monkeypatch,  # noqa: ANN001
    capsys,  # noqa: ANN001
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(footprint, "free_bytes", lambda device: 1000)
    assert main(["run", "--set", "rounds=1", "clients=4", "maps=learned", "--out", "r", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("sheaf-fmtl: error: the restriction maps"), err
    assert "the host has 0.001 MB free" in err and "lower gamma" in err
    assert list(tmp_path.iterdir()) == []
