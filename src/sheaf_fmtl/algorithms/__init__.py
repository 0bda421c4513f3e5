"""Algorithms behind one typed protocol (:class:`.base.Algorithm`), one small file each; importing
this package registers every one of them (explicit imports, below)."""

from __future__ import annotations

from . import (
    dfedu,
    ditto,
    dpsgd,
    fedavg,
    local,
    perfedavg,
    pfedme,
    sheaf_coordinates,
    sheaf_fmtl,
    sheaf_functional,
    sheaf_proxy,
)
from .base import ALGORITHMS, Algorithm, Context, State, make_algorithm, register

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Context",
    "State",
    "make_algorithm",
    "register",
    "ditto",
    "dfedu",
    "dpsgd",
    "fedavg",
    "local",
    "perfedavg",
    "pfedme",
    "sheaf_coordinates",
    "sheaf_functional",
    "sheaf_fmtl",
    "sheaf_proxy",
]
