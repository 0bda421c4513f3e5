"""Algorithms behind one typed protocol (:class:`.base.Algorithm`), one small file each; importing
this package registers every one of them, with what the package knows of each
(``config.registry``), in the order they are listed to users (explicit imports, below)."""

from __future__ import annotations

# isort: off
from . import sheaf_fmtl, sheaf_coordinates, sheaf_proxy, sheaf_functional
from . import local, dfedu, dpsgd, fedavg, ditto, pfedme, perfedavg
from . import pfedgraph, dpfl
from . import fedavg_ft, dpsgd_ft, partial

# isort: on
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
    "dpfl",
    "dpsgd",
    "dpsgd_ft",
    "fedavg",
    "fedavg_ft",
    "local",
    "partial",
    "perfedavg",
    "pfedgraph",
    "pfedme",
    "sheaf_coordinates",
    "sheaf_functional",
    "sheaf_fmtl",
    "sheaf_proxy",
]
