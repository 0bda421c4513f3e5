"""Sizes are known before anything is allocated: generated data, the graph with its per-edge state,
``.npy`` / ``.npz`` files (from their headers) and the seeds of a reproduction are compared with what
this process may use, and refused in one line (the estimate, the limit, the key to change) within
seconds, leaving nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.cli import main
from sheaf_fmtl.data import sizes
from sheaf_fmtl.data.sizes import generated_bytes, stored_bytes
from tests.helpers import error_line


def _declared(path: Path, shape: tuple[int, ...]) -> Path:
    """A ``.npy`` whose header declares ``shape`` (float32) and that holds no data."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return path


def test_stored_bytes_come_from_the_headers(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((7, 3), np.float64))
    assert stored_bytes(tmp_path / "a.npy") == 7 * 3 * 8
    np.savez(tmp_path / "b.npz", x_0=np.zeros((5, 2), np.float32), y_0=np.zeros(5, np.int64))
    assert stored_bytes(tmp_path / "b.npz") == 5 * 2 * 4 + 5 * 8
    assert stored_bytes(_declared(tmp_path / "huge.npy", (10**12, 4))) == 16 * 10**12


def test_the_limit_this_process_has_is_the_one_compared():
    """Under an RLIMIT_AS of 1 GiB above what the process maps already, about 1 GiB is left, and
    the message names the limit."""
    code = (
        "import resource; from sheaf_fmtl.data import sizes\n"
        "used = sizes._status_kib('VmSize') * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), resource.RLIM_INFINITY))\n"
        "print(*sizes.memory_left(), sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    left, what = out.strip().split("|")
    assert 0.5 * (1 << 30) < int(left) <= (1 << 30) and what.startswith("RLIMIT_AS")


@pytest.mark.parametrize(
    "sets, fragment",
    [
        (["clients=1000000"], "dataset synthetic-clusters with 1000000 clients needs about"),
        (["data.features=1e9"], "dataset synthetic-clusters with its default number of clients needs about"),
        (["data.classes=1e7"], "needs about"),
        (["clients=5000", "graph=complete"], "the complete graph on 5000 clients with its per-edge state"),
    ],
    ids=["clients", "features", "classes", "complete-graph"],
)
def test_a_run_too_large_for_this_process_is_refused_in_seconds(
    tmp_path, capsys, monkeypatch, sets, fragment
):
    monkeypatch.setattr(sizes, "memory_left", lambda: (2 << 30, "a test's limit of 2 GiB"))
    t0 = time.perf_counter()
    assert main(["run", "--quiet", "--set", *sets, "rounds=1", "--out", str(tmp_path / "run")]) == 2
    err = error_line(capsys)
    assert fragment in err and "more than the 2 GiB this process may use (a test's limit of 2 GiB)" in err, (
        err
    )
    assert "nothing was allocated" in err and not (tmp_path / "run").exists()
    assert time.perf_counter() - t0 < 20  # (the complete graph's 5000 clients' data is made first)


def test_data_describe_and_reproduce_refuse_sizes_before_work(tmp_path, capsys):
    t0 = time.perf_counter()
    assert main(["data", "describe", "synthetic", "--clients", "10000000"]) == 2
    assert "dataset synthetic with 10000000 clients needs about" in error_line(capsys)
    assert main(["reproduce", "comparison", "--seeds", "100000000", "--out", str(tmp_path / "r")]) == 2
    assert "--seeds 100000000: give a number of seeds from 1 to 1000" in error_line(capsys)
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "r").exists()


def test_files_declaring_more_rows_than_fit_are_refused_from_their_headers(tmp_path, capsys):
    pool = _declared(tmp_path / "pool.npy", (10**12, 24))
    sets = ["maps=functional", f"probe_data={pool}", "rounds=1", "clients=4"]
    assert main(["run", "--quiet", "--set", *sets, "--out", str(tmp_path / "a")]) == 2
    err = error_line(capsys)
    assert f"config key 'probe_data' = {pool} needs about" in err and not (tmp_path / "a").exists()
    data = tmp_path / "clients.npz"
    with zipfile.ZipFile(data, "w") as z:
        z.writestr("num_clients.npy", _npy(np.array(2)))
        for i in range(2):
            z.writestr(f"y_{i}.npy", _npy(np.zeros(3, np.int64)))
            _declared(tmp_path / "x.npy", (10**12, 5))
            z.write(tmp_path / "x.npy", f"x_{i}.npy")
    assert main(["run", "--quiet", "--set", f"dataset=file:{data}", "--out", str(tmp_path / "b")]) == 2
    err = error_line(capsys)
    assert f"{data} needs about" in err and "give a smaller file" in err and not (tmp_path / "b").exists()
    assert json.dumps(err)  # (one printable line)


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_the_estimate_grows_with_what_the_config_asks():
    small = generated_bytes("synthetic", 10, {})
    assert small is not None and generated_bytes("synthetic", 20, {}) == 2 * small
    assert generated_bytes("school", 10, {}) is None  # read from files: their headers are checked


def test_under_processes_every_rank_holding_the_data_counts(tmp_path, capsys, monkeypatch):
    """Data that one process could hold, four cannot: refused once, before any rank starts."""
    one = generated_bytes("synthetic", 8, {})
    assert one is not None
    monkeypatch.setattr(sizes, "memory_left", lambda: (2 * one, "a test's limit"))
    sets = ["dataset=synthetic", "clients=8", "rounds=1", "processes=4"]
    assert main(["run", "--quiet", "--set", *sets, "--out", str(tmp_path / "run")]) == 2
    err = error_line(capsys)
    assert "4 processes, each with dataset synthetic needs about" in err and "lower processes" in err
    assert not (tmp_path / "run").exists()


def test_models_too_large_for_this_process_are_refused_from_their_real_size(monkeypatch) -> None:
    """The check counts each architecture's real parameters (a CNN's, not a linear model's), for
    the clients held here, before any model is drawn."""
    from sheaf_fmtl.config import RunConfig
    from sheaf_fmtl.data.base import DatasetError
    from sheaf_fmtl.runtime.engine import simulate

    from ..test_cuda import image_dataset

    data = image_dataset(4, shape=(1, 28, 28))
    config = RunConfig(model="cnn", clients=4, graph="complete", rounds=1)
    built = simulate.build_simulation(config, dataset=data)
    params = int(built.ctx.fed.node_dims().sum())
    need = params * 4 * simulate.MODEL_COPIES
    monkeypatch.setattr(sizes, "memory_left", lambda: (need - 1, "a test's limit"))
    with pytest.raises(
        DatasetError, match=f"the models of the 4 clients held here \\({params:,} parameters"
    ) as e:
        simulate.build_simulation(config, dataset=data)
    assert len(str(e.value).splitlines()) == 1 and "nothing was allocated" in str(e.value)
    monkeypatch.setattr(sizes, "memory_left", lambda: (need + 1, "a test's limit"))
    simulate.build_simulation(config, dataset=data)  # (just enough: built)
