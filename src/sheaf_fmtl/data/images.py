"""Image datasets: Rotated MNIST (R-MNIST) and Heterogeneous CIFAR-10 (H-CIFAR-10).

Paper, Appendix "Additional Details on Datasets":

* R-MNIST -- "we shuffle and then evenly separate the original MNIST dataset between 40 clients ...
  randomly divide the clients into four groups, each containing 10 clients ... apply rotations of
  {0, 90, 180, 270} degrees to each group". Table "Data partitioning" gives n_k = 1500 = 60,000 / 40,
  so by default only the 60,000 training images are used (option ``use_test=True``: all 70,000, i.e.
  1,750 per client). Read from ``mnist.npz`` (Keras layout) or the four IDX files (optionally .gz).
* H-CIFAR-10 -- 30 clients, each with "a random number of samples from 5 randomly selected classes".
  Table "Data partitioning": n_k between 1515 and 1839, i.e. the 50,000 training images split over
  30 clients (mean 1,667), so by default the test batch is not used (option ``use_test``). Every
  class is held by exactly 15 clients (so all images are used) and each class's images are split
  among its holders with random weights ``U(1 - spread, 1 + spread)``; the default spread 0.17 gives
  min/max n_k of about 1520/1810 on average over seeds, close to the paper's 1515/1839.

With ``partition`` (``dirichlet``, ``classes``, ``iid``; :mod:`.partition`) both pool their
training images (and the test images with ``use_test``) and split them over ``clients`` (default 40
and 30) instead; R-MNIST's clients keep the paper's rotation groups (the clients drawn into four
equal groups, rotated by 0, 90, 180, 270 degrees), only which images a client holds changes.

Images are returned as ``[n, C, 28|32, 28|32]`` float32 in [0, 1].
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..spelling import setting
from .base import DataRequest, DatasetError, RawClient, RawFederated, register
from .files import find_file
from .options import check_options
from .partition import pooled_clients

MNIST_IDX = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
#: Any one makes R-MNIST available; the first folder holding one is read (``mnist.npz`` preferred there).
_IDX = MNIST_IDX["x_train"]
MNIST_FILES = ("mnist.npz", "mnist/mnist.npz", _IDX, f"{_IDX}.gz", f"mnist/{_IDX}", f"mnist/{_IDX}.gz")
CIFAR_DIR = "cifar-10-batches-py"
CIFAR_FILES = (f"{CIFAR_DIR}/data_batch_1", f"cifar10/{CIFAR_DIR}/data_batch_1")
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_TEST = "test_batch"


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream]))


# ----------------------------------------------------------------------------------------- MNIST
def read_idx(path: Path) -> np.ndarray:
    """An IDX file (MNIST's format; gzip when the name ends in .gz) as a uint8 array."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as e:
        raise DatasetError(f"{path}: cannot read ({type(e).__name__}: {e})") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DatasetError(f"{path}: not an IDX file (bad magic number)")
    if raw[2] != 0x08:
        raise DatasetError(f"{path}: IDX element type 0x{raw[2]:02x}; expected unsigned bytes (0x08)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim < 1 or len(raw) < header:
        raise DatasetError(f"{path}: IDX header truncated")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims))
    if len(raw) - header != expected:
        got = len(raw) - header
        raise DatasetError(f"{path}: header says {dims} ({expected} bytes) but {got} bytes follow")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _check_mnist(arrays: dict[str, np.ndarray], where: dict[str, Path]) -> dict[str, np.ndarray]:
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        px, py = where[f"x_{split}"], where[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise DatasetError(f"{px}: x_{split} has shape {x.shape}; expected (n, 28, 28)")
        if y.ndim != 1 or len(y) != len(x):
            raise DatasetError(f"{py}: y_{split} has shape {y.shape}; expected ({len(x)},)")
        if not np.issubdtype(x.dtype, np.integer) or x.min(initial=0) < 0 or x.max(initial=0) > 255:
            raise DatasetError(f"{px}: x_{split} must hold uint8 pixels 0..255 (dtype {x.dtype})")
        if not np.issubdtype(y.dtype, np.integer) or y.min(initial=0) < 0 or y.max(initial=0) > 9:
            raise DatasetError(f"{py}: y_{split} must hold digit labels 0..9")
    return {k: np.asarray(v, np.uint8 if k[0] == "x" else np.int64) for k, v in arrays.items()}


def read_mnist(data_dir: Path | str | None = None, search: bool = False) -> dict[str, np.ndarray]:
    """``x_train, y_train, x_test, y_test`` from ``mnist.npz`` or the four IDX files beside each other,
    whichever the first data folder holding either has (``mnist.npz`` preferred within a folder)."""
    found = find_file("rmnist", MNIST_FILES, data_dir, search)
    if found.suffix == ".npz":
        return _read_mnist_npz(found)
    where: dict[str, Path] = {}
    for key, name in MNIST_IDX.items():
        options = [found.parent / name, found.parent / f"{name}.gz"]
        path = next((p for p in options if p.exists()), None)
        if path is None:
            raise DatasetError(f"rmnist: {options[0]}(.gz) is missing (the IDX files lie beside {found})")
        where[key] = path
    return _check_mnist({k: read_idx(p) for k, p in where.items()}, where)


def _read_mnist_npz(npz: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(npz, allow_pickle=False) as z:
            missing = sorted(set(MNIST_IDX) - set(z.files))
            if missing:
                raise DatasetError(f"{npz}: missing keys {missing}")
            arrays = {k: z[k] for k in MNIST_IDX}
    except DatasetError:
        raise
    except Exception as e:  # zipfile.BadZipFile, ValueError, OSError, EOFError, ...
        raise DatasetError(f"{npz}: cannot read as .npz ({type(e).__name__}: {e})") from e
    return _check_mnist(arrays, dict.fromkeys(MNIST_IDX, npz))


def rotated_mnist(
    images: np.ndarray, labels: np.ndarray, seed: int, n_clients: int = 40, n_groups: int = 4
) -> tuple[list[RawClient], list[int]]:
    """Shuffle, split evenly over ``n_clients``, rotate group g's clients by ``g * 90`` degrees.

    Returns the clients and each client's rotation as a count of 90-degree turns (``np.rot90``)."""
    if len(images) < n_clients:
        raise DatasetError(
            f"rmnist: {len(images)} images cannot be split over {n_clients} clients; give "
            f"{setting('clients', max(len(images), 2))} or fewer"
        )
    rng = _rng(seed, 303)
    per = len(images) // n_clients
    order = rng.permutation(len(images))
    turns = rotation_groups(rng, n_clients, n_groups)
    parts = [order[k * per : (k + 1) * per] for k in range(n_clients)]
    return rotated(images, labels, parts, turns), turns


def rotation_groups(rng: np.random.Generator, n_clients: int, n_groups: int = 4) -> list[int]:
    """Each client's rotation, in 90-degree turns: the clients drawn into ``n_groups`` equal groups,
    group g turned ``g`` times."""
    turns = [0] * n_clients
    for pos, client in enumerate(rng.permutation(n_clients)):
        turns[client] = pos * n_groups // n_clients
    return turns


def rotated(
    images: np.ndarray, labels: np.ndarray, parts: list[np.ndarray], turns: list[int]
) -> list[RawClient]:
    """Client k: the images ``parts[k]`` turned ``turns[k]`` times, as ``[n, 1, 28, 28]`` in [0, 1]."""
    clients = []
    for idx, t in zip(parts, turns, strict=True):
        x = np.rot90(images[idx], t, axes=(1, 2)).astype(np.float32) / 255.0
        clients.append(RawClient(x[:, None], labels[idx].astype(np.int64)))
    return clients


@register("rmnist", files=MNIST_FILES, pooled=True)
def rmnist(request: DataRequest) -> RawFederated:
    o = check_options("rmnist", request.options, {"use_test": False, "pool": 0})
    m = read_mnist(request.data_dir, request.data_search)
    x, y = m["x_train"], m["y_train"]
    if o["use_test"]:
        x, y = np.concatenate([x, m["x_test"]]), np.concatenate([y, m["y_test"]])
    if o["pool"]:  # a seeded sample of the pool (smaller runs of a partitioned R-MNIST)
        x, y = _sampled_pool(x, y, int(o["pool"]), request)
    if request.partition.method != "none":
        parts = pooled_clients("rmnist", y, request, 40)
        turns = rotation_groups(_rng(request.seed, 303), len(parts))
        return RawFederated("rmnist", "classification", 10, tuple(rotated(x, y, parts, turns)), reduce=False)
    clients, _ = rotated_mnist(x, y, request.seed)
    return RawFederated("rmnist", "classification", 10, tuple(clients))


def _sampled_pool(x: np.ndarray, y: np.ndarray, pool: int, request: DataRequest) -> tuple[np.ndarray, ...]:
    """``pool`` images of the pool, drawn from the seed alone (option ``pool``; with a partition only)."""
    if request.partition.method == "none" or not 2 <= pool <= len(y):
        raise DatasetError(
            f"rmnist: data.pool = {pool} samples a pool of {len(y)} images for a partition; give "
            f"2 <= pool <= {len(y)} with {setting('partition', 'dirichlet')} (or classes, iid)"
        )
    keep = np.sort(_rng(request.seed, 304).choice(len(y), pool, replace=False))
    return x[keep], y[keep]


# -------------------------------------------------------------------------------------- CIFAR-10
class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Refuses every global except what a pickled numpy array needs (pickles can run code)."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # bytes pickled by Python 3 with protocol 2
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: images ``[n, 3, 32, 32]`` uint8 and labels ``[n]`` int64."""
    try:
        obj = _NumpyOnlyUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except Exception as e:  # UnpicklingError, EOFError, OSError, ValueError, ...
        raise DatasetError(f"{path}: cannot unpickle CIFAR batch ({type(e).__name__}: {e})") from e
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        raise DatasetError(f"{path}: expected a dict with keys b'data' and b'labels'")
    data, labels = np.asarray(obj[b"data"]), np.asarray(obj[b"labels"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise DatasetError(f"{path}: data is {data.dtype} {data.shape}; expected uint8 (n, 3072)")
    if labels.ndim != 1 or len(labels) != len(data):
        raise DatasetError(f"{path}: {labels.shape} labels for {len(data)} images")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min(initial=0) < 0 or labels.max(initial=0) > 9:
        raise DatasetError(f"{path}: labels must be integers 0..9")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def read_cifar10(
    data_dir: Path | str | None, use_test: bool, search: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    first = find_file("hcifar10", CIFAR_FILES, data_dir, search)
    root = first.parent
    names = CIFAR_TRAIN + ([CIFAR_TEST] if use_test else [])
    for name in names:
        if not (root / name).exists():
            raise DatasetError(
                f"hcifar10: {root / name} is missing (CIFAR-10 python version has "
                f"{', '.join(CIFAR_TRAIN + [CIFAR_TEST])})"
            )
    batches = [read_cifar_batch(root / name) for name in names]
    return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])


def class_assignment(
    rng: np.random.Generator, n_clients: int, n_classes: int, per_client: int
) -> list[list[int]]:
    """``per_client`` distinct random classes per client, each class used by (nearly) equally many."""
    total = n_clients * per_client
    capacity = np.full(n_classes, total // n_classes) + (np.arange(n_classes) < total % n_classes)
    capacity = capacity[rng.permutation(n_classes)]
    out = []
    for k in range(n_clients):
        left = n_clients - k
        forced = list(np.flatnonzero(capacity >= left))
        free = np.flatnonzero((capacity > 0) & (capacity < left))
        need = per_client - len(forced)
        p = capacity[free] / capacity[free].sum() if len(free) else None
        chosen = forced + list(rng.choice(free, size=need, replace=False, p=p)) if need > 0 else forced
        capacity[chosen] -= 1
        out.append(sorted(int(c) for c in chosen))
    return out


def heterogeneous_split(
    labels: np.ndarray, seed: int, n_clients: int = 30, per_client: int = 5, spread: float = 0.17
) -> list[np.ndarray]:
    """Indices of each client's samples for H-CIFAR-10 (see the module docstring)."""
    rng = _rng(seed, 404)
    n_classes = int(labels.max()) + 1
    classes = class_assignment(rng, n_clients, n_classes, per_client)
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for c in range(n_classes):
        holders = [k for k in range(n_clients) if c in classes[k]]
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(idx) < len(holders):
            raise DatasetError(f"hcifar10: class {c} has {len(idx)} images for {len(holders)} clients")
        w = rng.uniform(1 - spread, 1 + spread, len(holders))
        cuts = np.floor(np.cumsum(w) / w.sum() * len(idx)).astype(int)[:-1]
        for k, chunk in zip(holders, np.split(idx, cuts), strict=True):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


@register("hcifar10", files=CIFAR_FILES, pooled=True)
def hcifar10(request: DataRequest) -> RawFederated:
    o = check_options("hcifar10", request.options, {"use_test": False, "spread": 0.17})
    if not 0.0 <= float(o["spread"]) < 1.0:
        raise DatasetError(
            f"hcifar10: data.spread = {o['spread']!r:.80}; expected 0 <= spread < 1 "
            f"(e.g. {setting('data.spread', 0.17)}, its default)"
        )
    x, y = read_cifar10(request.data_dir, bool(o["use_test"]), request.data_search)
    if len(np.unique(y)) != 10:
        raise DatasetError(f"hcifar10: the CIFAR-10 batches hold {len(np.unique(y))} classes; expected 10")
    pooled = request.partition.method != "none"
    parts = (
        pooled_clients("hcifar10", y, request, 30)
        if pooled
        else heterogeneous_split(y, request.seed, spread=float(o["spread"]))
    )
    clients = tuple(RawClient(x[idx].astype(np.float32) / 255.0, y[idx]) for idx in parts)
    return RawFederated("hcifar10", "classification", 10, clients, reduce=not pooled)
