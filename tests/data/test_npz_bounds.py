"""An ``.npz``'s size is known from every member before any is read: an array stored under a name
without ``.npy`` (numpy reads ``x_0`` as it reads ``x_0.npy``), a member that is not an array (numpy
hands over its bytes: a zip bomb of zeros), and a narrow dtype that the readers widen to float32
(``uint8`` images) all count, so a file too large for this process is refused in one line before
any data is read."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.data.base import DatasetError
from sheaf_fmtl.data.files import read_npz_clients
from sheaf_fmtl.data.sizes import stored_bytes


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array)
    return buf.getvalue()


def _header_only(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    """An ``.npy`` header claiming ``shape`` with (almost) no data behind it."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 16


def _archive(path: Path, members: dict[str, bytes], compress: bool = False) -> Path:
    how = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", how) as z:
        for name, body in members.items():
            z.writestr(name, body)
    return path


def _base() -> dict[str, bytes]:
    return {"num_clients.npy": _npy(np.array(1)), "y_0.npy": _npy(np.zeros(4, np.int64))}


@pytest.mark.parametrize("name", ["x_0", "x_0.npy", "x_0.NPY.bin"])
def test_an_array_claiming_a_huge_shape_is_refused_under_any_name(tmp_path, name):
    path = _archive(tmp_path / "d.npz", {**_base(), name: _header_only((1 << 40, 4))})
    assert stored_bytes(path) >= (1 << 40) * 4 * 8
    with pytest.raises(DatasetError, match=r"needs about .* GiB, more than"):
        read_npz_clients(path)


def test_a_member_that_is_no_array_counts_its_whole_size(tmp_path):
    bomb = b"\0" * (64 << 20)  # 64 MiB of zeros, a few kilobytes deflated
    path = _archive(tmp_path / "d.npz", {**_base(), "x_0.npy": _npy(np.zeros((4, 2))), "junk": bomb}, True)
    assert path.stat().st_size < (1 << 20) and stored_bytes(path) >= len(bomb)


def test_a_narrow_dtype_counts_as_the_float32_it_becomes(tmp_path):
    path = _archive(tmp_path / "d.npz", {**_base(), "x_0.npy": _npy(np.zeros((1000, 10), np.uint8))})
    assert stored_bytes(path) >= 1000 * 10 * 4
    assert read_npz_clients(path)[0]["x"].shape == (1000, 10)  # (a small one still reads)


@pytest.mark.parametrize(
    "dataset, option",
    [("synthetic-clusters", "groups"), ("synthetic-hetero", "groups"), ("synthetic", "features")],
)
def test_a_generated_datasets_every_size_key_counts_before_anything_is_drawn(dataset, option):
    from sheaf_fmtl.data.sizes import check_generated, generated_bytes

    small = generated_bytes(dataset, 4, {})
    big = generated_bytes(dataset, 4, {option: 10**9})
    assert small is not None and big is not None and big > 1000 * small
    with pytest.raises(DatasetError, match=r"needs about .* GiB"):
        check_generated(dataset, 4, {option: 10**9})
