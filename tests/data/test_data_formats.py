"""Readers on small files written here in each dataset's exact public format, and corrupted copies."""

from __future__ import annotations

import gzip
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from sheaf_fmtl.data.base import DatasetError
from sheaf_fmtl.data.files import find_file
from sheaf_fmtl.data.images import read_idx
from sheaf_fmtl.data.protocol import apply_protocol
from sheaf_fmtl.data.registry import DataRequest, load, load_raw

pytestmark = pytest.mark.usefixtures("only_given_folders")

RNG = np.random.default_rng(1234)


def req(d: Path, seed: int = 0, **options: object) -> DataRequest:
    return DataRequest(seed=seed, data_dir=d, options=options)


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def assert_rejected(name: str, d: Path, bad_file: Path, match: str = "") -> None:
    with pytest.raises(DatasetError) as e:
        load_raw(name, req(d))
    assert str(bad_file.name) in str(e.value), str(e.value)
    if match:
        assert match in str(e.value).lower(), str(e.value)


# ------------------------------------------------------------------------- MOCHA .mat (Vehicle, GLEAM)
def cells(arrays: list[np.ndarray]) -> np.ndarray:
    out = np.empty((1, len(arrays)), dtype=object)
    for i, a in enumerate(arrays):
        out[0, i] = a
    return out


def write_mocha(path: Path, n_clients: int, d: int, labels=(-1, 1)) -> tuple[list, list]:
    xs = [RNG.normal(size=(int(RNG.integers(6, 12)), d)) for _ in range(n_clients)]
    ys = [RNG.choice(labels, size=(len(x), 1)).astype(np.float64) for x in xs]
    for y in ys:
        y[:2, 0] = labels  # both classes in every client
    scipy.io.savemat(path, {"X": cells(xs), "Y": cells(ys)})
    return xs, ys


@pytest.mark.parametrize(
    ("name", "clients", "d", "labels"),
    [
        ("vehicle", 23, 100, (-1, 1)),
        ("gleam", 38, 180, (-1, 1)),
        ("gleam", 38, 180, (0, 1)),
    ],
)
def test_mocha_mat_reader(tmp_path, name, clients, d, labels):
    xs, ys = write_mocha(tmp_path / f"{name}.mat", clients, d, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # vehicle.mat present: no subset warning
        raw = load_raw(name, req(tmp_path))
    assert raw.task == "classification" and raw.num_classes == 2 and len(raw.clients) == clients
    for c, x, y in zip(raw.clients, xs, ys, strict=True):
        np.testing.assert_allclose(c.x, x, rtol=1e-6)
        assert c.x.shape == (len(x), d)
        np.testing.assert_array_equal(c.y, (y[:, 0] == labels[1]).astype(np.int64))
    ds = load(name, req(tmp_path))
    assert ds.num_clients == clients


@pytest.mark.parametrize("defect", ["truncated", "features", "nan", "label", "clients", "no_y"])
def test_mocha_mat_rejects_corrupt_files(tmp_path, defect):
    path = tmp_path / "vehicle.mat"
    xs, ys = write_mocha(path, 23, 100)
    if defect == "truncated":
        truncate(path)
    else:
        if defect == "features":
            xs[4] = xs[4][:, :99]
        if defect == "nan":
            xs[7][0, 3] = np.nan
        if defect == "label":
            ys[2][0, 0] = 2
        if defect == "clients":
            xs, ys = xs[:22], ys[:22]
        mat = {"X": cells(xs)} if defect == "no_y" else {"X": cells(xs), "Y": cells(ys)}
        scipy.io.savemat(path, mat)
    assert_rejected("vehicle", tmp_path, path)


# ------------------------------------------------------------------------------------------ HAR
def write_har(root: Path, rows_per_subject: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    subjects = np.repeat(np.arange(1, 31), rows_per_subject)
    RNG.shuffle(subjects)
    x = RNG.normal(size=(len(subjects), 561))
    y = RNG.integers(1, 7, size=len(subjects))
    test = np.isin(subjects, [2, 4, 9, 10, 12, 13, 18, 20, 24])  # UCI's test subjects
    for split, mask in (("train", ~test), ("test", test)):
        (root / split).mkdir(parents=True)
        np.savetxt(root / split / f"X_{split}.txt", x[mask], fmt="%.8e")
        np.savetxt(root / split / f"y_{split}.txt", y[mask], fmt="%d")
        np.savetxt(root / split / f"subject_{split}.txt", subjects[mask], fmt="%d")
    return x, y, subjects


def test_har_reader_merges_splits_and_groups_by_subject(tmp_path):
    x, y, s = write_har(tmp_path / "UCI HAR Dataset")
    raw = load_raw("har", req(tmp_path))
    assert raw.num_classes == 6 and len(raw.clients) == 30
    assert sum(len(c.y) for c in raw.clients) == len(y)
    for k, c in enumerate(raw.clients):
        mine = s == k + 1
        assert c.x.shape == (mine.sum(), 561)
        # same multiset of rows regardless of the train/test order
        got = sorted(map(tuple, np.column_stack([c.y, c.x[:, :3]]).round(4).tolist()))
        want = sorted(map(tuple, np.column_stack([y[mine] - 1, x[mine, :3]]).round(4).tolist()))
        assert got == want
    assert set(np.concatenate([c.y for c in raw.clients]).tolist()) <= set(range(6))


@pytest.mark.parametrize("defect", ["truncated", "nan", "label", "subject", "columns", "rows"])
def test_har_rejects_corrupt_files(tmp_path, defect):
    root = tmp_path / "UCI HAR Dataset"
    write_har(root)
    xf, yf, sf = (root / "train" / f"{k}_train.txt" for k in ("X", "y", "subject"))
    bad = xf
    lines = xf.read_text().splitlines()
    if defect == "truncated":
        xf.write_bytes(xf.read_bytes()[: len(xf.read_bytes()) - 500])
    elif defect == "nan":
        xf.write_text("\n".join(lines[:3] + [lines[3].replace(lines[3].split()[5], "NaN", 1)] + lines[4:]))
    elif defect == "columns":
        xf.write_text("\n".join(" ".join(ln.split()[:560]) for ln in lines))
    elif defect == "label":
        bad = yf
        yf.write_text(yf.read_text().replace("\n", "\n7\n", 1))
        yl = yf.read_text().split()
        yf.write_text("\n".join(yl[: len(lines)]))
    elif defect == "subject":
        bad = sf
        sl = sf.read_text().split()
        sf.write_text("\n".join(["31"] + sl[1:]))
    elif defect == "rows":
        bad = yf
        yf.write_text("\n".join(yf.read_text().split()[:-1]))
    assert_rejected("har", tmp_path, bad)


# ---------------------------------------------------------------------------------------- School
def write_school_mat(path: Path, n: int = 139, d: int = 28) -> None:
    xs = [RNG.integers(0, 2, size=(int(RNG.integers(3, 8)), d)).astype(np.uint8) for _ in range(n)]
    ys = [RNG.integers(1, 71, size=(len(x), 1)).astype(np.uint8) for x in xs]
    scipy.io.savemat(path, {"X": cells(xs), "Y": cells(ys)})


def test_school_reader_small(tmp_path):
    write_school_mat(tmp_path / "school.mat")
    raw = load_raw("school", req(tmp_path))
    assert raw.task == "regression" and len(raw.clients) == 139 and raw.clients[0].x.shape[1] == 28


@pytest.mark.parametrize("defect", ["truncated", "schools", "features"])
def test_school_rejects_corrupt_files(tmp_path, defect):
    path = tmp_path / "school.mat"
    if defect == "truncated":
        write_school_mat(path)
        truncate(path, 0.6)
    else:
        write_school_mat(path, n=138 if defect == "schools" else 139, d=27 if defect == "features" else 28)
    assert_rejected("school", tmp_path, path)


def test_school_npz_rejects_nan(tmp_path):
    arrays = {"num_clients": np.int64(139)}
    for i in range(139):
        arrays[f"x_{i}"] = RNG.normal(size=(4, 28))
        arrays[f"y_{i}"] = RNG.normal(size=4)
    arrays["x_77"][1, 1] = np.nan
    np.savez(tmp_path / "school.npz", **arrays)
    assert_rejected("school", tmp_path, tmp_path / "school.npz", "nan")


# ----------------------------------------------------------------------------------- MNIST (IDX)
def idx_bytes(a: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, a.ndim]) + np.asarray(a.shape, dtype=">u4").tobytes()
    return header + a.astype(np.uint8).tobytes()


def write_mnist_idx(d: Path, n_train: int = 80, n_test: int = 40, gz: bool = True) -> dict[str, np.ndarray]:
    arrays = {
        "train-images-idx3-ubyte": RNG.integers(0, 256, size=(n_train, 28, 28)),
        "train-labels-idx1-ubyte": RNG.integers(0, 10, size=n_train),
        "t10k-images-idx3-ubyte": RNG.integers(0, 256, size=(n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": RNG.integers(0, 10, size=n_test),
    }
    for name, a in arrays.items():
        data = idx_bytes(a)
        if gz:
            (d / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (d / name).write_bytes(data)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_idx_reader_and_rmnist_from_idx(tmp_path, gz):
    arrays = write_mnist_idx(tmp_path, gz=gz)
    suffix = ".gz" if gz else ""
    np.testing.assert_array_equal(
        read_idx(tmp_path / f"train-images-idx3-ubyte{suffix}"), arrays["train-images-idx3-ubyte"]
    )
    raw = load_raw("rmnist", req(tmp_path))
    assert len(raw.clients) == 40 and {c.x.shape for c in raw.clients} == {(2, 1, 28, 28)}
    raw_all = load_raw("rmnist", req(tmp_path, use_test=True))
    assert {len(c.y) for c in raw_all.clients} == {3}  # (80 + 40) / 40
    src = {img.tobytes() for img in arrays["train-images-idx3-ubyte"].astype(np.uint8)}
    for c in raw.clients:
        img = np.rint(c.x[0, 0] * 255).astype(np.uint8)
        assert any(np.rot90(img, -k).tobytes() in src for k in range(4))


@pytest.mark.parametrize("defect", ["truncated", "magic", "dims", "label", "count"])
def test_idx_rejects_corrupt_files(tmp_path, defect):
    arrays = write_mnist_idx(tmp_path, gz=False)
    img, lab = tmp_path / "train-images-idx3-ubyte", tmp_path / "train-labels-idx1-ubyte"
    bad = img
    if defect == "truncated":
        truncate(img, 0.9)
    elif defect == "magic":
        img.write_bytes(b"\x01\x02" + img.read_bytes()[2:])
    elif defect == "dims":
        img.write_bytes(idx_bytes(RNG.integers(0, 256, size=(80, 27, 28))))
    elif defect == "label":
        bad = lab
        labels = arrays["train-labels-idx1-ubyte"].copy()
        labels[5] = 10
        lab.write_bytes(idx_bytes(labels))
    elif defect == "count":
        bad = lab
        lab.write_bytes(idx_bytes(arrays["train-labels-idx1-ubyte"][:70]))
    assert_rejected("rmnist", tmp_path, bad)


@pytest.mark.parametrize("defect", ["truncated", "missing_key", "float_nan", "label"])
def test_mnist_npz_rejects_corrupt_files(tmp_path, defect):
    path = tmp_path / "mnist.npz"
    a = {
        "x_train": RNG.integers(0, 256, size=(80, 28, 28)).astype(np.uint8),
        "y_train": RNG.integers(0, 10, size=80).astype(np.uint8),
        "x_test": RNG.integers(0, 256, size=(20, 28, 28)).astype(np.uint8),
        "y_test": RNG.integers(0, 10, size=20).astype(np.uint8),
    }
    if defect == "missing_key":
        del a["y_test"]
    if defect == "float_nan":
        a["x_train"] = a["x_train"].astype(np.float32)
        a["x_train"][0, 0, 0] = np.nan
    if defect == "label":
        a["y_train"][3] = 11
    np.savez_compressed(path, **a)
    if defect == "truncated":
        truncate(path, 0.7)
    assert_rejected("rmnist", tmp_path, path)


# ------------------------------------------------------------------------------- CIFAR-10 pickles
def write_cifar(d: Path, per_class: int = 10) -> np.ndarray:
    root = d / "cifar-10-batches-py"
    root.mkdir()
    everything = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = RNG.permutation(np.repeat(np.arange(10), per_class))
        data = RNG.integers(0, 256, size=(len(labels), 3072)).astype(np.uint8)
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels.tolist(),
            b"data": data,
            b"filenames": [f"img_{k}.png".encode() for k in range(len(labels))],
        }
        with open(root / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        if name != "test_batch":
            everything.append(data)
    return np.concatenate(everything)


def test_hcifar10_five_classes_per_client_and_every_image_once(tmp_path):
    data = write_cifar(tmp_path, per_class=20)  # 200 per batch, 1000 training images
    raw = load_raw("hcifar10", req(tmp_path, seed=7))
    assert len(raw.clients) == 30 and raw.num_classes == 10
    assert all(len(np.unique(c.y)) == 5 for c in raw.clients)
    assert sum(len(c.y) for c in raw.clients) == len(data)
    rows = {r.tobytes() for r in data}
    seen = set()
    for c in raw.clients:
        assert c.x.shape[1:] == (3, 32, 32) and c.x.dtype == np.float32 and 0 <= c.x.min() <= c.x.max() <= 1
        for img in np.rint(c.x * 255).astype(np.uint8).reshape(len(c.x), -1):
            assert img.tobytes() in rows
            seen.add(img.tobytes())
    assert len(seen) == len(data)
    sizes = [len(c.y) for c in raw.clients]
    assert len(set(sizes)) > 1, "clients should get random numbers of samples"
    again = load_raw("hcifar10", req(tmp_path, seed=7))
    other = load_raw("hcifar10", req(tmp_path, seed=8))
    assert [c.y.tolist() for c in again.clients] == [c.y.tolist() for c in raw.clients]
    assert [c.y.tolist() for c in other.clients] != [c.y.tolist() for c in raw.clients]
    ds = apply_protocol(raw, 0)
    assert ds.num_clients == 30


@pytest.mark.parametrize("defect", ["truncated", "shape", "label", "evil", "missing"])
def test_cifar_rejects_corrupt_files(tmp_path, defect):
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    if defect == "truncated":
        truncate(path)
    elif defect == "missing":
        path.unlink()
    else:
        data = RNG.integers(0, 256, size=(100, 3071 if defect == "shape" else 3072)).astype(np.uint8)
        labels = [k % 10 for k in range(100)]
        if defect == "label":
            labels[0] = 10
        obj: object = {b"data": data, b"labels": labels}
        if defect == "evil":

            class Evil:
                def __reduce__(self):
                    return (os.system, ("true",))

            obj = {b"data": data, b"labels": labels, b"x": Evil()}
        path.write_bytes(pickle.dumps(obj, protocol=2))
    assert_rejected("hcifar10", tmp_path, path)


# --------------------------------------------------------------------------------- file: user data
def test_user_npz_with_fixed_test_split_and_different_feature_counts(tmp_path):
    arrays = {"num_clients": np.int64(3)}
    for i, d in enumerate((4, 6, 9)):
        arrays[f"x_{i}"] = RNG.normal(size=(12, d))
        arrays[f"y_{i}"] = RNG.integers(0, 3, size=12)
        arrays[f"x_test_{i}"] = RNG.normal(size=(5, d))
        arrays[f"y_test_{i}"] = RNG.integers(0, 3, size=5)
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)
    ds = load(f"file:{path}", DataRequest(seed=0))
    assert ds.task == "classification" and ds.num_classes == 3
    assert [ds.feature_shape(i) for i in range(3)] == [(4,), (6,), (9,)]
    assert all(len(c.y_test) == 5 for c in ds.clients)
    for c, i in zip(ds.clients, range(3), strict=True):
        np.testing.assert_array_equal(c.y_test, arrays[f"y_test_{i}"])
    forced = load_raw(f"file:{path}", DataRequest(options={"task": "regression"}))
    assert forced.task == "regression" and forced.num_classes == 0


def test_user_csv_folder_regression(tmp_path):
    folder = tmp_path / "clients"
    folder.mkdir()
    for name, d in (("b.csv", 3), ("a.csv", 5)):
        table = np.column_stack([RNG.normal(size=(10, d)), RNG.normal(size=10)])
        header = ",".join([f"f{k}" for k in range(d)] + ["target"])
        np.savetxt(folder / name, table, delimiter=",", header=header, comments="")
    raw = load_raw(f"file:{folder}", DataRequest())
    assert raw.task == "regression"
    assert [c.x.shape[1] for c in raw.clients] == [5, 3]  # sorted by file name: a.csv, b.csv
    assert len(load_raw(f"file:{folder}", DataRequest(clients=1)).clients) == 1


@pytest.mark.parametrize("defect", ["ragged", "nan", "text"])
def test_user_csv_rejects_bad_rows(tmp_path, defect):
    folder = tmp_path / "clients"
    folder.mkdir()
    good = "1,2,0\n3,4,1\n5,6,0\n"
    (folder / "a.csv").write_text(good)
    bad = {"ragged": good + "7,8\n", "nan": good + "nan,1,1\n", "text": good + "x,y,z\n"}[defect]
    (folder / "b.csv").write_text(bad)
    with pytest.raises(DatasetError, match="b.csv"):
        load_raw(f"file:{folder}", DataRequest())


@pytest.mark.parametrize("defect", ["truncated", "missing_y", "no_num_clients", "option", "labels"])
def test_user_npz_rejects_bad_input(tmp_path, defect):
    path = tmp_path / "mine.npz"
    arrays = {
        "num_clients": np.int64(2),
        "x_0": RNG.normal(size=(5, 2)),
        "y_0": np.arange(5) % 2,
        "x_1": RNG.normal(size=(5, 2)),
        "y_1": np.arange(5) % 2,
    }
    if defect == "missing_y":
        del arrays["y_1"]
    if defect == "no_num_clients":
        del arrays["num_clients"]
    if defect == "labels":
        arrays["y_1"] = -np.ones(5)
    np.savez(path, **arrays)
    if defect == "truncated":
        truncate(path)
    options = {"colour": "red"} if defect == "option" else {"task": "classification"}
    with pytest.raises(DatasetError, match="mine.npz"):
        load_raw(f"file:{path}", DataRequest(options=options))


# ------------------------------------------------------------------------------------ locating
def test_missing_dataset_names_every_path_searched(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_raw("gleam", req(tmp_path))
    msg = str(e.value)
    assert str(tmp_path / "gleam.mat") in msg and str(tmp_path / "gleam" / "gleam.mat") in msg
    assert "fetch" in msg


def test_env_var_is_searched_when_no_data_dir(tmp_path, monkeypatch):
    (tmp_path / "thing.bin").write_bytes(b"x")
    monkeypatch.setenv("SHEAF_FMTL_DATA", str(tmp_path))
    assert find_file("x", ["thing.bin"]) == tmp_path / "thing.bin"
    with pytest.raises(DatasetError, match=str(tmp_path / "absent.bin")):
        find_file("x", ["absent.bin"])


def test_unknown_options_rejected(tmp_path):
    write_mocha(tmp_path / "gleam.mat", 38, 180)
    with pytest.raises(DatasetError, match="unknown dataset option data.foo"):
        load_raw("gleam", req(tmp_path, foo=1))
