"""Warnings the library issues point at the user's line (the first frame outside the package),
however deep in the library they are raised."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

import sheaf_fmtl
from sheaf_fmtl.warn import user_stacklevel


def test_a_data_warning_from_deep_inside_a_run_names_this_file() -> None:
    rng = np.random.default_rng(0)
    data = []
    for i in range(3):
        x = rng.normal(size=(20, 4)).astype(np.float32)
        y = np.zeros(20, np.int64) if i == 0 else (x[:, 0] > 0).astype(np.int64)  # client 0: one class
        data.append((x[:15], y[:15], x[15:], y[15:]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sheaf_fmtl.run(data=data, algorithm="local", rounds=1)
    one_class = [w for w in caught if "all one class" in str(w.message)]
    assert one_class and all(Path(w.filename).resolve() == Path(__file__).resolve() for w in one_class)


def test_outside_the_package_the_level_is_the_callers() -> None:
    assert user_stacklevel() == 1  # called from here: this frame is already outside
