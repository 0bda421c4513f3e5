"""Human Activity Recognition (UCI HAR; Anguita et al. 2013) from its public text files.

Paper, Appendix "Additional Details on Datasets": 30 individuals (clients), 561 time/frequency
features from smartphone accelerometer and gyroscope, 6 activities. The official train/test files are
merged (10,299 rows) and grouped by ``subject`` id; activity labels 1..6 become 0..5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import DataRequest, DatasetError, RawClient, RawFederated, register
from .files import find_file
from .options import check_options

HAR_DIR = "UCI HAR Dataset"
HAR_FILES = (f"{HAR_DIR}/train/X_train.txt", f"har/{HAR_DIR}/train/X_train.txt")  # marks the folder
N_SUBJECTS, N_FEATURES, N_CLASSES = 30, 561, 6


def _read_table(path: Path, cols: int | None) -> np.ndarray:
    """A whitespace-separated numeric text file as a 2-D float array with ``cols`` columns."""
    try:
        numbered = [(k, ln.split()) for k, ln in enumerate(path.read_text().splitlines(), 1) if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: cannot read ({e})") from e
    if not numbered:
        raise DatasetError(f"{path}: file is empty")
    (first, head), lines = numbered[0], [ln for _, ln in numbered]
    bad = next(((k, ln) for k, ln in numbered if len(ln) != len(head)), None)
    if bad is not None:  # line numbers of the file
        raise DatasetError(
            f"{path}: ragged rows (line {bad[0]} has {len(bad[1])} values, line {first} has "
            f"{len(head)}); the file may be truncated"
        )
    try:
        arr = np.array(lines, dtype=np.float64)
    except ValueError as e:
        raise DatasetError(f"{path}: non-numeric value ({e})") from e
    if cols is not None and arr.shape[1] != cols:
        raise DatasetError(f"{path}: {arr.shape[1]} columns; expected {cols}")
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"{path}: contains NaN or infinite values")
    return arr


def _read_split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = _read_table(root / split / f"X_{split}.txt", N_FEATURES)
    ys = [root / split / f"{k}_{split}.txt" for k in ("y", "subject")]
    y, s = (_read_table(p, 1)[:, 0] for p in ys)
    for p, v, lo, hi in ((ys[0], y, 1, N_CLASSES), (ys[1], s, 1, N_SUBJECTS)):
        if len(v) != len(x):
            raise DatasetError(f"{p}: {len(v)} rows but X_{split}.txt has {len(x)}")
        if np.any(v != np.round(v)) or v.min() < lo or v.max() > hi:
            raise DatasetError(f"{p}: values must be integers in {lo}..{hi}")
    return x, y.astype(np.int64) - 1, s.astype(np.int64)


def read_har(root: Path) -> list[RawClient]:
    """One client per subject (sorted by id), train and test files merged."""
    parts = [_read_split(root, split) for split in ("train", "test")]
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    s = np.concatenate([p[2] for p in parts])
    subjects = np.unique(s)
    if len(subjects) != N_SUBJECTS:
        raise DatasetError(f"{root}: {len(subjects)} subjects in subject_*.txt; expected {N_SUBJECTS}")
    return [RawClient(x[s == k].astype(np.float32), y[s == k]) for k in subjects]


@register("har", files=HAR_FILES)
def har(request: DataRequest) -> RawFederated:
    check_options("har", request.options, {})
    marker = find_file("har", HAR_FILES, request.data_dir, request.data_search)
    return RawFederated("har", "classification", N_CLASSES, tuple(read_har(marker.parent.parent)))
