"""Vehicle Sensor and GLEAM in MOCHA's ``.mat`` layout (Smith et al. 2017).

Paper, Appendix "Additional Details on Datasets": Vehicle Sensor -- 23 sensors (clients), 100
acoustic+seismic features, binary AAV vs DW; GLEAM -- 38 Google Glass wearers, 180 features, binary
eating / not eating. Files hold cell arrays ``X{i}`` (n_i x d) and ``Y{i}`` (n_i x 1) with labels in
{-1, 1} (mapped to {0, 1}); GLEAM files with {0, 1} labels are accepted too.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import scipy.io

from ..warn import user_stacklevel
from .base import DataRequest, DatasetError, RawClient, RawFederated, register
from .files import as_features, as_targets, find_file, map_labels, mat_cells, read_npz_clients
from .options import check_options

VEHICLE = {"clients": 23, "features": 100}
GLEAM = {"clients": 38, "features": 180}
VEHICLE_SUBSET = "vehicle_ditto_train_subset.npz"
VEHICLE_FILES = ("vehicle.mat", "vehicle/vehicle.mat", VEHICLE_SUBSET)  # preferred first, per folder
GLEAM_FILES = ("gleam.mat", "gleam/gleam.mat")


def _binary(ys: list[np.ndarray], path: Path) -> list[np.ndarray]:
    """{-1, 1} -> {0, 1}; a file whose labels are all in {0, 1} is kept as is."""
    values = set(np.unique(np.concatenate(ys)).tolist())
    mapping = {0.0: 0, 1.0: 1} if values <= {0.0, 1.0} else {-1.0: 0, 1.0: 1}
    return [map_labels(y, path, f"Y{{{i + 1}}}", mapping) for i, y in enumerate(ys)]


def read_mocha_mat(path: Path, n_clients: int, n_features: int) -> list[RawClient]:
    """Clients of a MOCHA-style ``.mat``; shapes, labels and finiteness are checked."""
    try:
        mat = scipy.io.loadmat(str(path))
    except Exception as e:  # scipy raises ValueError, TypeError, OSError, MatReadError, ...
        raise DatasetError(f"{path}: cannot read as a MATLAB file ({type(e).__name__}: {e})") from e
    xs, ys = mat_cells(mat, "X", path), mat_cells(mat, "Y", path)
    if len(xs) != n_clients or len(ys) != n_clients:
        raise DatasetError(f"{path}: {len(xs)} X cells and {len(ys)} Y cells; expected {n_clients} clients")
    x_arr = [as_features(x, path, f"X{{{i + 1}}}", n_features) for i, x in enumerate(xs)]
    y_arr = [
        as_targets(y, path, f"Y{{{i + 1}}}", len(x)) for i, (x, y) in enumerate(zip(x_arr, ys, strict=True))
    ]
    labels = _binary(y_arr, path)
    return [RawClient(x.astype(np.float32), y) for x, y in zip(x_arr, labels, strict=True)]


def _no_options(name: str, request: DataRequest) -> None:
    check_options(name, request.options, {})


@register("vehicle", files=VEHICLE_FILES)
def vehicle(request: DataRequest) -> RawFederated:
    """Vehicle Sensor from ``vehicle.mat``; falls back to Ditto's small training subset when the first
    data folder holding either has only the subset."""
    _no_options("vehicle", request)
    path = find_file("vehicle", VEHICLE_FILES, request.data_dir, request.data_search)
    if path.suffix == ".mat":
        clients = read_mocha_mat(path, VEHICLE["clients"], VEHICLE["features"])
        return RawFederated("vehicle", "classification", 2, tuple(clients))
    parts = read_npz_clients(path)
    if len(parts) != VEHICLE["clients"]:
        raise DatasetError(f"{path}: {len(parts)} clients; expected {VEHICLE['clients']}")
    xs = [as_features(c["x"], path, f"x_{i}", VEHICLE["features"]) for i, c in enumerate(parts)]
    ys = [as_targets(c["y"], path, f"y_{i}", len(x)) for i, (c, x) in enumerate(zip(parts, xs, strict=True))]
    labels = [map_labels(y, path, f"y_{i}", {-1.0: 0, 1.0: 1}) for i, y in enumerate(ys)]
    subset = tuple(RawClient(x.astype(np.float32), y) for x, y in zip(xs, labels, strict=True))
    warnings.warn(
        f"vehicle: vehicle.mat not found; using {path}, a small pre-standardised subset (1,860 of "
        "~43,700 rows) -- fine for smoke tests, not for reproducing the paper's Vehicle numbers",
        stacklevel=user_stacklevel(),
    )
    return RawFederated("vehicle", "classification", 2, subset)


@register("gleam", files=GLEAM_FILES)
def gleam(request: DataRequest) -> RawFederated:
    """GLEAM from MOCHA-style ``gleam.mat``."""
    _no_options("gleam", request)
    path = find_file("gleam", GLEAM_FILES, request.data_dir, request.data_search)
    clients = read_mocha_mat(path, GLEAM["clients"], GLEAM["features"])
    return RawFederated("gleam", "classification", 2, tuple(clients))
