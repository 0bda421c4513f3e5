"""The scaling sweep: ``sim.step()`` time while the map volume grows (more edges, larger maps)."""

from __future__ import annotations

import dataclasses
import gc
import statistics
from typing import Any

import numpy as np

from .. import progress
from ..reference import loop as ref
from .measure import time_steps
from .settings import Setting
from .synthetic import build, lower_bound_bytes


def scaling_sweep(quick: bool, device: str = "cpu", smoke: bool = False) -> list[dict[str, Any]]:
    """``sim.step()`` time while the map volume grows two ways: more edges (more clients, fixed
    ``d_ij * d_i``) and larger maps (fixed graph, larger ``gamma``), logistic models."""
    features, clients, gammas = (199, [10, 20, 30, 40], [0.05, 0.1, 0.2, 0.4])
    if quick:
        features, clients = 149, [8, 12, 16, 20]
    if smoke:
        features, clients, gammas = 19, [4, 8], [0.2, 0.6]
    base = Setting(
        "scaling",
        20,
        0.3,
        "logistic",
        (features,),
        10,
        60,
        0.1,
        0.01,
        0.05,
        0.01,
        32,
        rounds=3 if quick else 5,
        warmup=1,
    )
    points = [("edges", dataclasses.replace(base, clients=n)) for n in clients]
    points += [("map_size", dataclasses.replace(base, clients=clients[1], gamma=g)) for g in gammas]
    out = []
    for sweep, s in progress.bar(points, desc="scaling sweep", unit="setting"):
        sim = build(s, device)
        bounds = lower_bound_bytes(sim)
        layout = ref.sheaf_state(sim).layout
        steps = time_steps(sim, s.warmup, s.rounds, device, "")
        b = layout.buckets[0]
        out.append(
            {
                "sweep": sweep,
                "clients": s.clients,
                "gamma": s.gamma,
                "edges": sim.ctx.graph.num_edges,
                "half_edges": sim.ctx.graph.num_half_edges,
                "map_elements_per_half_edge": b.edge_dim * b.node_dim,
                "map_bytes": bounds["maps"],
                "s_per_round": statistics.median(steps),
            }
        )
        del sim
        gc.collect()
    return out


def linear_fit(x: list[float], y: list[float]) -> dict[str, float]:
    """Least-squares ``y = intercept + slope * x`` and its R^2."""
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    pred = intercept + slope * np.asarray(x, float)
    ss = float(((np.asarray(y) - np.mean(y)) ** 2).sum())
    r2 = 1.0 - float(((np.asarray(y) - pred) ** 2).sum()) / ss if ss > 0 else 1.0
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2}
