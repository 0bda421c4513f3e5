"""School (ILEA exam scores, MALSAR's ``school.mat``): regression, one client per school.

Paper, Appendix "Additional Details on Datasets" / Table "Data partitioning": 139 schools, 28 features
(column 27 is a constant bias), 15,362 students, 22..251 per school; targets are exam scores 1..70.
Read from ``school.mat`` (object arrays ``X``, ``Y`` of shape (1, 139)) or ``school.npz`` (per-client).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.io

from .base import DataRequest, DatasetError, RawClient, RawFederated, register
from .files import as_features, as_targets, find_file, mat_cells, read_npz_clients
from .options import check_options

N_SCHOOLS, N_FEATURES = 139, 28
SCHOOL_FILES = ("school.mat", "school.npz", "school/school.mat")


def _clients(path: Path, xs: list[Any], ys: list[Any]) -> list[RawClient]:
    if len(xs) != N_SCHOOLS or len(ys) != N_SCHOOLS:
        raise DatasetError(f"{path}: {len(xs)} X and {len(ys)} Y entries; expected {N_SCHOOLS} schools")
    out = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        xa = as_features(x, path, f"school {i} features", N_FEATURES)
        ya = as_targets(y, path, f"school {i} targets", len(xa))
        out.append(RawClient(xa.astype(np.float32), ya.astype(np.float32)))
    return out


def read_school_mat(path: Path) -> list[RawClient]:
    try:
        mat = scipy.io.loadmat(str(path))
    except Exception as e:  # scipy raises ValueError, TypeError, OSError, MatReadError, ...
        raise DatasetError(f"{path}: cannot read as a MATLAB file ({type(e).__name__}: {e})") from e
    return _clients(path, mat_cells(mat, "X", path), mat_cells(mat, "Y", path))


def read_school_npz(path: Path) -> list[RawClient]:
    parts = read_npz_clients(path)
    return _clients(path, [p["x"] for p in parts], [p["y"] for p in parts])


@register("school", files=SCHOOL_FILES)
def school(request: DataRequest) -> RawFederated:
    check_options("school", request.options, {})
    path = find_file("school", SCHOOL_FILES, request.data_dir, request.data_search)
    clients = read_school_mat(path) if path.suffix == ".mat" else read_school_npz(path)
    return RawFederated("school", "regression", 0, tuple(clients))
