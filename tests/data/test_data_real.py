"""Readers against the real files in ``$SHEAF_FMTL_DATA`` (skipped, with the reason, when absent)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from sheaf_fmtl.data.images import read_mnist
from sheaf_fmtl.data.registry import DataRequest, load, load_raw
from sheaf_fmtl.data.school import read_school_mat, read_school_npz

from ..conftest import NO_DATA, shared_data_dir

_found = shared_data_dir()
REAL = Path(_found) if _found else None


def need(*names: str) -> Path:
    if REAL is None:
        pytest.skip(NO_DATA)
    missing = [n for n in names if not (REAL / n).exists()]
    if missing:
        pytest.skip(f"real data file(s) {missing} not in {REAL} ($SHEAF_FMTL_DATA)")
    return REAL


def test_school_mat_and_npz_agree_with_the_published_counts():
    d = need("school.mat", "school.npz")
    mat, npz = read_school_mat(d / "school.mat"), read_school_npz(d / "school.npz")
    sizes = [len(c.y) for c in mat]
    assert len(mat) == 139 and sum(sizes) == 15362
    assert min(sizes) == 22 and max(sizes) == 251
    assert {c.x.shape[1] for c in mat} == {28}
    for a, b in zip(mat, npz, strict=True):
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.y, b.y)
    y = np.concatenate([c.y for c in mat])
    assert y.min() == 1 and y.max() == 70  # exam scores, DATA.md
    assert np.all(np.concatenate([c.x for c in mat])[:, 27] == 1)  # bias column


def test_school_partition_depends_only_on_seed():
    d = need("school.mat")
    a, b, c = (load("school", DataRequest(seed=s, data_dir=d)) for s in (3, 3, 4))
    for ca, cb in zip(a.clients, b.clients, strict=True):
        np.testing.assert_array_equal(ca.y_train, cb.y_train)
        np.testing.assert_array_equal(ca.x_test, cb.x_test)
    assert any(
        len(ca.y_train) != len(cc.y_train) or not np.array_equal(ca.y_train, cc.y_train)
        for ca, cc in zip(a.clients, c.clients, strict=True)
    )
    assert a.task == "regression" and a.num_clients == 139


def test_mnist_has_70000_images():
    d = need("mnist.npz")
    m = read_mnist(d)
    assert m["x_train"].shape == (60000, 28, 28) and m["x_test"].shape == (10000, 28, 28)
    assert len(m["y_train"]) + len(m["y_test"]) == 70000
    assert set(np.unique(m["y_train"]).tolist()) == set(range(10))


def _source_index(x_train: np.ndarray) -> dict[bytes, int]:
    return {img.tobytes(): i for i, img in enumerate(x_train)}


def test_rmnist_is_40_equal_clients_in_4_rotation_groups():
    d = need("mnist.npz")
    m = read_mnist(d)
    raw = load_raw("rmnist", DataRequest(seed=0, data_dir=d))
    assert len(raw.clients) == 40
    assert {c.x.shape for c in raw.clients} == {(1500, 1, 28, 28)}  # 60,000 / 40, the paper's n_k
    index = _source_index(m["x_train"])
    turns, used = [], []
    for c in raw.clients:
        assert c.x.dtype == np.float32 and c.x.min() >= 0 and c.x.max() <= 1
        imgs = np.rint(c.x[:8, 0] * 255).astype(np.uint8)
        ks = set()
        for j, img in enumerate(imgs):
            hits = [k for k in range(4) if np.rot90(img, -k).tobytes() in index]
            assert len(hits) >= 1, "client image is not a rotation of any MNIST training image"
            k = hits[0]
            src = index[np.rot90(img, -k).tobytes()]
            np.testing.assert_array_equal(img, np.rot90(m["x_train"][src], k))
            assert c.y[j] == m["y_train"][src]
            ks.add(k)
            used.append(src)
        assert len(ks) == 1, "images of one client carry different rotations"
        turns.append(ks.pop())
    assert sorted(np.bincount(turns, minlength=4).tolist()) == [10, 10, 10, 10]
    assert turns != sorted(turns), "groups should be random, not consecutive client ids"
    assert len(set(used)) == len(used)
    # shuffled: client 0 is not the first 1500 source images
    assert not set(used[:8]) <= set(range(1500))


def test_rmnist_same_seed_same_partition_other_seed_different():
    d = need("mnist.npz")
    a, b, c = (load_raw("rmnist", DataRequest(seed=s, data_dir=d, clients=3)) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.clients[2].x, b.clients[2].x)
    assert not np.array_equal(a.clients[2].y, c.clients[2].y)


def test_vehicle_falls_back_to_subset_with_warning():
    d = need("vehicle_ditto_train_subset.npz")
    if (d / "vehicle.mat").exists():
        pytest.skip("vehicle.mat present; fallback not used")
    with pytest.warns(UserWarning, match="subset"):
        raw = load_raw("vehicle", DataRequest(data_dir=d))
    assert len(raw.clients) == 23 and {c.x.shape[1] for c in raw.clients} == {100}
    assert sum(len(c.y) for c in raw.clients) == 1860
    assert set(np.concatenate([c.y for c in raw.clients]).tolist()) == {0, 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = load("vehicle", DataRequest(seed=5, data_dir=d))
        b = load("vehicle", DataRequest(seed=6, data_dir=d))
    assert [len(c.y_train) for c in a.clients] != [len(c.y_train) for c in b.clients] or any(
        not np.array_equal(x.y_train, y.y_train) for x, y in zip(a.clients, b.clients, strict=True)
    )


@pytest.mark.parametrize("name", ["school.mat", "school.npz", "mnist.npz", "vehicle_ditto_train_subset.npz"])
def test_truncated_copies_of_real_files_are_rejected(tmp_path, name):
    from sheaf_fmtl.data.base import DatasetError

    d = need(name)
    data = (d / name).read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    dataset = {"school.mat": "school", "school.npz": "school", "mnist.npz": "rmnist"}.get(name, "vehicle")
    with pytest.raises(DatasetError, match=name.replace(".", r"\.")):
        load_raw(dataset, DataRequest(data_dir=tmp_path))
