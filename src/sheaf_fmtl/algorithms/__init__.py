"""Algorithms behind one typed protocol (:class:`.base.Algorithm`), one small file each, in four
families: Sheaf-FMTL's map modes (:mod:`.maps`), the model-gossiping baselines and their compressed
gossip (:mod:`.gossip`), the server, personalised and graph-learning baselines (:mod:`.baselines`),
and the training step they share (:mod:`.training`). Importing this package registers every one of
them, with what the package knows of each (``config.registry``), in the order they are listed to
users (explicit imports, below)."""

from __future__ import annotations

# isort: off
from .maps import learned, coordinates, proxy, functional
from .baselines import local
from .gossip import dfedu, dpsgd
from .baselines import fedavg, ditto, pfedme, perfedavg
from .baselines import pfedgraph, dpfl
from .baselines import fedavg_ft, dpsgd_ft, partial

# isort: on
from .protocol.algorithm import ALGORITHMS, Algorithm, Context, State, make_algorithm, register

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Context",
    "State",
    "make_algorithm",
    "register",
    "coordinates",
    "ditto",
    "dfedu",
    "dpfl",
    "dpsgd",
    "dpsgd_ft",
    "fedavg",
    "fedavg_ft",
    "functional",
    "learned",
    "local",
    "partial",
    "perfedavg",
    "pfedgraph",
    "pfedme",
    "proxy",
]
