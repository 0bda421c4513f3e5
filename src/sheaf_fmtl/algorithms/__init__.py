"""Algorithms behind one protocol (:mod:`.base`), one small file each, found through a registry."""

from __future__ import annotations

import importlib

from .base import ALGORITHMS, Algorithm, Context, State, make_algorithm, register

_MODULES = ("sheaf_fmtl", "local", "dpsgd", "dfedu", "fedavg", "ditto", "pfedme", "perfedavg")


def load_all() -> None:
    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}")


__all__ = ["ALGORITHMS", "Algorithm", "Context", "State", "make_algorithm", "register", "load_all"]
