"""The round benchmark of one setting: ``sim.step()`` against the memory-bandwidth floor and
against the per-edge loop reference (:mod:`sheaf_fmtl.reference.loop`) on the same state.

:func:`run_setting` is meant to run in a fresh process (:mod:`.runner`), so that its peak memory
is the setting's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .. import progress
from ..metrics.memory import peak_rss_bytes
from ..reference import loop as ref
from ..runtime.engine.simulate import Simulation
from .measure import rss_bytes, time_steps
from .settings import Setting
from .synthetic import build, lower_bound_bytes
from .timing import timed


@contextlib.contextmanager
def frozen_gradients(sim: Simulation[Any]) -> Iterator[None]:
    """Within the block every round reuses one set of local gradients (drawn on entry from the next
    mini-batches) through :attr:`Context.gradient_source`, so timing sees only the rest of a round."""
    previous = sim.ctx.gradient_source
    frozen = sim.ctx.stochastic_gradients(sim.state.thetas)
    sim.ctx.gradient_source = lambda thetas: frozen
    try:
        yield
    finally:
        sim.ctx.gradient_source = previous


def time_map_work(sim: Simulation[Any], device: str, min_seconds: float = 0.5, blocks: int = 9) -> float:
    """Seconds of a round's map work (sheaf term of the theta step, messages, exchanges, map step
    including its periodic folds) with the local gradients frozen: the median over up to ``blocks``
    blocks of whole fold periods (``map_defer`` rounds, so the folds are paid for) of the mean
    round. Blocks are repeated until ``min_seconds`` have passed: a millisecond round timed twice
    is noise on a shared machine; a block of a large setting takes longer than ``min_seconds``."""
    store = getattr(sim.state, "store", None)
    period = max(1, max(store.depth) if store is not None and store.depth else 1)

    def block() -> None:
        for _ in range(per_block):
            sim.step()

    with frozen_gradients(sim):
        probe = timed(sim.step, device)  # also a warm-up round
        per_block = period * max(1, math.ceil(min_seconds / blocks / max(probe * period, 1e-9)))
        means: list[float] = []
        with progress.bar(desc="map work (gradients frozen)", unit="round", transient=True) as bar:
            while not means or (len(means) < blocks and sum(means) * per_block < min_seconds):
                means.append(timed(block, device) / per_block)
                bar.update(per_block)
        return statistics.median(means)


def reference_edges(sim: Simulation[Any], max_bytes: int) -> tuple[list[int], float]:
    """Undirected edges whose two maps fit in ``max_bytes`` (all when possible), and the factor that
    scales the subset's edge time to all edges (ratio of map bytes)."""
    layout = ref.sheaf_state(sim).layout
    per_edge = np.zeros(sim.ctx.graph.num_edges)
    for b in layout.buckets:
        np.add.at(per_edge, b.half_edges // 2, b.edge_dim * b.node_dim * 4)  # both maps of an edge count
    total = float(per_edge.sum())
    if total <= max_bytes:
        return list(range(len(per_edge))), 1.0
    chosen = np.flatnonzero(np.cumsum(per_edge) <= max_bytes)
    chosen = chosen if len(chosen) else np.array([0])
    return chosen.tolist(), total / float(per_edge[chosen].sum())


def reference_budget(s: Setting, device: str) -> int:
    """Map bytes the loop reference may copy: ``ref_max_bytes``, or on a GPU up to half of the free
    device memory (an H200 holds a second copy of all maps even at gamma 0.03 in float32)."""
    if not device.startswith("cuda"):
        return s.ref_max_bytes
    free, _ = torch.cuda.mem_get_info()
    return max(s.ref_max_bytes, free // 2)


def time_reference(sim: Simulation[Any], s: Setting, device: str) -> dict[str, Any]:
    """Seconds per round of the loop reference: per-client autograd gradients + per-edge loop,
    the edge part measured on a subset of edges and scaled when the maps do not fit twice."""
    cfg = sim.config
    edges, scale = reference_edges(sim, reference_budget(s, device))
    state = ref.from_simulation(sim, edges)
    grad = ref.minibatch_gradients(sim.ctx.fed, cfg.batch_size, s.seed)
    grad_s, edge_s = [], []
    warm = 1 if s.ref_rounds > 2 else 0  # first calls (autograd graph set-up, allocations) not timed
    for k in progress.bar(
        range(warm + s.ref_rounds), desc=f"{s.name}: loop reference", unit="round", transient=True
    ):
        grads: dict[int, torch.Tensor] = {}

        def grad_part(g: dict[int, torch.Tensor] = grads) -> None:
            g.update({i: grad(i, t) for i, t in state.thetas.items()})

        def edge_part(g: dict[int, torch.Tensor] = grads) -> None:
            ref.theta_step(state, g, cfg.lam_value, cfg.alpha)
            ref.map_step(state, cfg.lam_value, cfg.eta)

        t_grad, t_edge = timed(grad_part, device), timed(edge_part, device)
        if k >= warm:
            grad_s.append(t_grad)
            edge_s.append(t_edge)
    g, e = statistics.median(grad_s), statistics.median(edge_s)
    return {
        "edges_timed": len(edges),
        "edges_total": sim.ctx.graph.num_edges,
        "edge_scale": scale,
        "map_bytes_timed": state.map_bytes(),
        "gradient_s": g,
        "edge_s_timed": e,
        "edge_s": e * scale,
        "s_per_round": g + e * scale,
        "subset": scale > 1.0,
    }


def run_setting(s: Setting, device: str = "cpu") -> dict[str, Any]:
    """Build and time one setting in this process (call it in a fresh process for peak memory)."""
    rss0 = rss_bytes()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    sim = build(s, device)
    build_s = time.perf_counter() - t0
    bounds = lower_bound_bytes(sim)
    steps = time_steps(sim, s.warmup, s.rounds, device, f"{s.name}: sim.step()")
    peak = peak_rss_bytes()
    grads_s = [
        timed(lambda: sim.ctx.stochastic_gradients(sim.state.thetas), device) for _ in range(min(3, s.rounds))
    ]
    map_s = time_map_work(sim, device)
    out: dict[str, Any] = {
        "setting": dataclasses.asdict(s),
        "device": device,
        "build_s": build_s,
        "num_edges": sim.ctx.graph.num_edges,
        "half_edges": sim.ctx.graph.num_half_edges,
        "node_dims": sorted({int(d) for d in sim.ctx.fed.node_dims()}),
        "edge_dims": sorted({int(d) for d in ref.sheaf_state(sim).layout.edge_dims}),
        "bytes": bounds,
        "step_s": steps,
        "s_per_round": statistics.median(steps),
        "gradients_s": statistics.median(grads_s),
        "map_work_s": map_s,
        "threads": torch.get_num_threads(),
        "rss_after_imports": rss0,
        "peak_rss": peak,
    }
    if device.startswith("cuda"):
        out["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    out["reference"] = time_reference(sim, s, device)
    return out
