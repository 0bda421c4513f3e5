"""Benchmark harness: Sheaf-FMTL rounds against the memory-bandwidth floor (DESIGN.md section 2).

Per setting, a fresh subprocess builds the federation, graph and :class:`Simulation` and times
``sim.step()`` (whatever kernel the library has), records its peak RSS, then times the per-edge loop
reference (:mod:`.reference_loop`) on the same state. The parent measures the copy bandwidth, runs the
cohort benchmark (``Cohort.gradients`` vs a per-client autograd loop) and the scaling sweep.

Definitions (all printed and written to ``bench.json``):

- bandwidth ``BW = 2 * bytes / t`` of a large tensor copy (bytes read + bytes written per second);
- floor ``= 2 * bytes(all maps) / BW``: every map read and written once per round (Algorithm 1's map
  step ``P_ij <- P_ij - eta lam r_ij theta_i^T`` touches every entry);
- floor ratio ``R = median s/round of sim.step() / floor``;
- speed-up ``S = s/round of the loop reference / s/round of sim.step()``;
- memory ratio ``M = (peak RSS - RSS after imports) / (bytes(maps) + bytes(models) + bytes(data))``.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..config import RunConfig, validate
from ..data.base import FederatedDataset, RawClient, RawFederated
from ..data.protocol import apply_protocol
from ..federation import GROUP_CLIENTS, build_federation
from ..runtime.simulate import Simulation, build_simulation
from . import reference_loop as ref
from .roofline import cohort_roofline
from .timing import sync, timed

GiB = float(1 << 30)


@dataclass(frozen=True)
class Setting:
    """One benchmark problem: generated data of the given shape, an Erdos-Renyi graph, one model."""

    name: str
    clients: int
    graph_p: float
    model: str
    feature_shape: tuple[int, ...]
    classes: int
    samples: int  # per client, before the 75/25 split (half the clients keep 20% of their training data)
    gamma: float
    lam: float
    alpha: float
    eta: float
    batch_size: int
    rounds: int  # timed rounds (after warm-up)
    warmup: int = 1
    ref_max_bytes: int = 1 << 30  # the reference copies at most this many map bytes (else: a subset of edges)
    ref_rounds: int = 2
    seed: int = 0
    map_dtype: str = "float32"
    # Draw the maps on the device (config ``map_draw=device``) instead of the library's per-map CPU
    # draws: same distribution; the CPU draws of 35 GiB of maps take minutes, which a GPU benchmark
    # should not spend. Recorded in bench.json with the setting.
    map_init_on_device: bool = False

    def config(self, device: str = "cpu") -> RunConfig:
        return validate(
            RunConfig(
                algorithm="sheaf-fmtl",
                dataset=f"bench-{self.name}",
                model=self.model,
                clients=self.clients,
                graph="erdos-renyi",
                graph_p=self.graph_p,
                batch_size=self.batch_size,
                lam=self.lam,
                alpha=self.alpha,
                eta=self.eta,
                gamma=self.gamma,
                l2=1e-4,
                seed=self.seed,
                device=device,
                map_dtype=self.map_dtype,
                map_draw="device" if self.map_init_on_device else "host",
            )
        )


SMALL = Setting(
    "small", 20, 0.2, "logistic", (30,), 10, 200, 0.3, 0.05, 0.05, 0.01, 32,
    rounds=20, warmup=3, ref_rounds=20,
)
PAPER = Setting("paper", 40, 0.15, "cnn", (1, 28, 28), 10, 1500, 0.01, 0.001, 0.01, 0.001, 32, rounds=3)
QUICK_PAPER = dataclasses.replace(
    PAPER,
    name="paper-quick",
    clients=12,
    graph_p=0.3,
    samples=200,
    gamma=0.002,
    rounds=3,
    ref_max_bytes=64 << 20,
)
# The paper's largest setting (R-MNIST, gamma = 0.03, 24 GB in the paper): bfloat16 maps (~17 GiB).
LARGEST = dataclasses.replace(
    PAPER,
    name="paper-g0.03-bf16",
    gamma=0.03,
    map_dtype="bfloat16",
    rounds=2,
    ref_max_bytes=256 << 20,
    ref_rounds=1,
)
# The paper's largest setting in float32 (35 GiB of maps: a GPU with enough memory, e.g. an H200).
PAPER_G03 = dataclasses.replace(
    PAPER, name="paper-g0.03", gamma=0.03, rounds=3, ref_max_bytes=256 << 20, ref_rounds=1
)
COHORT_CLIENTS = 40
SMOKE = [
    dataclasses.replace(
        SMALL, name="small-smoke", clients=8, graph_p=0.4, samples=60, rounds=2, warmup=1, ref_rounds=1
    ),
    dataclasses.replace(
        PAPER,
        name="cnn-smoke",
        clients=4,
        graph_p=1.0,
        samples=40,
        gamma=0.001,
        rounds=2,
        ref_rounds=1,
        ref_max_bytes=1 << 20,
    ),
]


def settings(quick: bool) -> list[Setting]:
    return [SMALL, QUICK_PAPER if quick else PAPER]


SETTINGS = {s.name: s for s in (SMALL, PAPER, QUICK_PAPER, PAPER_G03, LARGEST, *SMOKE)}


def setting_named(name: str) -> Setting:
    if name not in SETTINGS:
        raise ValueError(f"unknown bench setting {name!r}; known: {', '.join(SETTINGS)}")
    return SETTINGS[name]


def for_device(s: Setting, device: str) -> Setting:
    """On a GPU a paper-scale round takes milliseconds: time more rounds and give the loop
    reference a warm-up round (``ref_rounds > 2``), whose first calls set up cuBLAS and the allocator."""
    if not device.startswith("cuda"):
        return s
    return dataclasses.replace(
        s, rounds=max(s.rounds, 10), warmup=max(s.warmup, 2), ref_rounds=max(s.ref_rounds, 3)
    )


# --------------------------------------------------------------------------------------------- data


def make_dataset(s: Setting) -> FederatedDataset:
    """Gaussian features, labels from a random linear teacher per rotation-like group of clients,
    split by the paper's protocol (75/25, half of the clients keep 20% of their training data)."""
    rng = np.random.default_rng(s.seed)
    dim = math.prod(s.feature_shape)
    teachers = [rng.standard_normal((dim, s.classes)).astype(np.float32) for _ in range(4)]
    clients = []
    for i in range(s.clients):
        x = rng.standard_normal((s.samples, dim), dtype=np.float32)
        y = (x @ teachers[i % 4]).argmax(1).astype(np.int64)
        clients.append(RawClient(x.reshape(s.samples, *s.feature_shape), y))
    return apply_protocol(
        RawFederated(f"bench-{s.name}", "classification", s.classes, tuple(clients)), s.seed
    )


def build(s: Setting, device: str = "cpu") -> Simulation:
    cfg = s.config(device)
    fed = build_federation(make_dataset(s), s.model, l2=cfg.l2, device=device)
    return build_simulation(cfg, fed=fed)


def lower_bound_bytes(sim: Simulation) -> dict[str, int]:
    """What a run cannot do without: every map, every model, every client's data (unpadded)."""
    maps = sum(m.numel() * m.element_size() for m in ref.sheaf_state(sim).maps)
    models = sum(t.numel() * t.element_size() for t in sim.state.thetas)
    data = sum(
        c.x_train.nbytes + c.y_train.nbytes + c.x_test.nbytes + c.y_test.nbytes
        for c in sim.ctx.fed.dataset.clients
    )
    return {"maps": maps, "models": models, "data": data, "total": maps + models + data}


# ------------------------------------------------------------------------------------------ timing


def copy_bandwidth(nbytes: int, device: str = "cpu", repeats: int = 5) -> float:
    """``2 * nbytes / t`` (read + write) of the fastest of ``repeats`` copies of a float32 tensor."""
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch
    best = min(timed(lambda: dst.copy_(src), device) for _ in range(repeats))
    return 2 * nbytes / best


def time_steps(sim: Simulation, warmup: int, rounds: int, device: str, desc: str) -> list[float]:
    for _ in range(warmup):
        sim.step()
    sync(device)
    return [
        timed(sim.step, device)
        for _ in tqdm(range(rounds), desc=desc, unit="round", leave=False, disable=rounds < 2)
    ]


def time_map_work(sim: Simulation, device: str, min_seconds: float = 0.5, blocks: int = 9) -> float:
    """Seconds of a round's map work (sheaf term of the theta step, messages, exchanges, map step
    including its periodic folds) with the local gradients frozen: the median over up to ``blocks``
    blocks of whole fold periods (``map_defer`` rounds, so the folds are paid for) of the mean
    round. Blocks are repeated until ``min_seconds`` have passed: a millisecond round timed twice
    is noise on a shared machine; a block of a large setting takes longer than ``min_seconds``."""
    frozen = sim.ctx.stochastic_gradients(sim.state.thetas)
    store = getattr(sim.state, "store", None)
    period = max(1, max(store.depth) if store is not None and store.depth else 1)
    sim.ctx.stochastic_gradients = lambda thetas: frozen  # type: ignore[method-assign]

    def block() -> None:
        for _ in range(per_block):
            sim.step()

    try:
        probe = timed(sim.step, device)  # also a warm-up round
        per_block = period * max(1, math.ceil(min_seconds / blocks / max(probe * period, 1e-9)))
        means: list[float] = []
        with tqdm(desc="map work (gradients frozen)", unit="round", leave=False) as bar:
            while not means or (len(means) < blocks and sum(means) * per_block < min_seconds):
                means.append(timed(block, device) / per_block)
                bar.update(per_block)
        return statistics.median(means)
    finally:
        del sim.ctx.stochastic_gradients


def reference_edges(sim: Simulation, max_bytes: int) -> tuple[list[int], float]:
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


def time_reference(sim: Simulation, s: Setting, device: str) -> dict[str, Any]:
    """Seconds per round of the loop reference: per-client autograd gradients + per-edge loop,
    the edge part measured on a subset of edges and scaled when the maps do not fit twice."""
    cfg = sim.config
    edges, scale = reference_edges(sim, reference_budget(s, device))
    state = ref.from_simulation(sim, edges)
    grad = ref.minibatch_gradients(sim.ctx.fed, cfg.batch_size, s.seed)
    grad_s, edge_s = [], []
    warm = 1 if s.ref_rounds > 2 else 0  # first calls (autograd graph set-up, allocations) not timed
    for k in tqdm(range(warm + s.ref_rounds), desc=f"{s.name}: loop reference", unit="round", leave=False):
        grads: dict[int, torch.Tensor] = {}

        def grad_part(g: dict[int, torch.Tensor] = grads) -> None:
            g.update({i: grad(i, t) for i, t in state.thetas.items()})

        def edge_part(g: dict[int, torch.Tensor] = grads) -> None:
            ref.theta_step(state, g, cfg.lam, cfg.alpha)
            ref.map_step(state, cfg.lam, cfg.eta)

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


def rss_bytes() -> int:
    """Current resident set size (Linux ``/proc``; falls back to the peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss()


def peak_rss() -> int:
    """Peak RSS of this process: ``VmHWM`` on Linux (``ru_maxrss`` survives ``exec`` and would report
    the parent's peak in a fresh child), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)


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
    peak = peak_rss()
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


def run_setting_subprocess(s: Setting, device: str, threads: int | None = None) -> dict[str, Any]:
    """:func:`run_setting` in a fresh interpreter; its last stdout line is the JSON result."""
    src = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    code = (
        f"import json, sys, torch; torch.set_num_threads({threads or torch.get_num_threads()}); "
        "from sheaf_fmtl.bench.harness import Setting, run_setting; "
        "a = json.loads(sys.argv[1]); a['feature_shape'] = tuple(a['feature_shape']); "
        "print(json.dumps(run_setting(Setting(**a), sys.argv[2])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(dataclasses.asdict(s)), device],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark of setting {s.name!r} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def map_kernels(
    device: str = "cpu", half_edges: int = 32, edge_dim: int = 348, node_dim: int = 34826, repeats: int = 5
) -> dict[str, Any]:
    """Effective bandwidth of each way to take the two map products (and to update the maps) on one
    stack of paper-shape maps ``[H, d_e, d]`` (float32; 1.45 GiB by default, far beyond any cache):
    ``GB/s = bytes moved / median time``, the maps read once per product, read and written once per
    update. The library's orientation was chosen on a CPU; this says which one a device prefers."""
    gen = torch.Generator(device=device).manual_seed(0)
    p = torch.randn(half_edges, edge_dim, node_dim, device=device, generator=gen)
    x = torch.randn(half_edges, node_dim, device=device, generator=gen)
    r = torch.randn(half_edges, edge_dim, device=device, generator=gen)
    depth = max(1, math.isqrt(edge_dim))
    u = torch.randn(half_edges, edge_dim, depth, device=device, generator=gen) * 1e-6
    v = torch.randn(half_edges, depth, node_dim, device=device, generator=gen)
    dst = torch.empty_like(p)
    nbytes = p.numel() * p.element_size()
    forms: dict[str, tuple[Any, int]] = {
        "copy (the floor's pass)": (lambda: dst.copy_(p), 2 * nbytes),
        "messages x^T P^T (library)": (lambda: torch.bmm(x.unsqueeze(1), p.transpose(1, 2)), nbytes),
        "messages P x": (lambda: torch.bmm(p, x.unsqueeze(2)), nbytes),
        "messages einsum": (lambda: torch.einsum("hed,hd->he", p, x), nbytes),
        "sheaf term r^T P (library)": (lambda: torch.bmm(r.unsqueeze(1), p), nbytes),
        "sheaf term P^T r": (lambda: torch.bmm(p.transpose(1, 2), r.unsqueeze(2)), nbytes),
        "sheaf term einsum": (lambda: torch.einsum("hed,he->hd", p, r), nbytes),
        f"fold baddbmm_ (depth {depth})": (lambda: dst.baddbmm_(u, v), 2 * nbytes),
        "rank-one addcmul_ (eager step)": (
            lambda: dst.addcmul_(r.unsqueeze(2), x.unsqueeze(1), value=-1e-9),
            2 * nbytes,
        ),
    }
    out: dict[str, Any] = {"shape": [half_edges, edge_dim, node_dim], "bytes": nbytes, "forms": {}}
    for name, (fn, moved) in forms.items():
        fn()  # warm-up (library handles, workspaces)
        t = statistics.median(timed(fn, device) for _ in range(repeats))
        out["forms"][name] = {"s": t, "GBps": moved / t / 1e9}
    return out


# ------------------------------------------------------------------------------------------ cohort


def cohort_benchmark(
    clients: int = COHORT_CLIENTS,
    batch_size: int = 32,
    repeats: int = 5,
    device: str = "cpu",
    samples: int = 400,
    model: str = "cnn",
) -> dict[str, Any]:
    """Local gradients of ``clients`` CNN clients on 1x28x28 inputs: one batched
    ``Cohort.gradients`` call per cohort vs a per-client autograd loop, on the same mini-batch rows;
    the speed-up is the median ratio over interleaved pairs of runs. ``model``: one architecture
    (one cohort of ``clients``) or a comma list assigned round-robin (one cohort per architecture).

    On CUDA, cuDNN's TF32 convolutions are turned off while it runs, so that the loop computes in
    float32 like the batched path (whose products are float32 ``bmm``) and the two can be compared."""
    s = dataclasses.replace(PAPER, name="cohort", clients=clients, samples=samples)
    fed = build_federation(make_dataset(s), model, l2=1e-4, device=device)
    gen = torch.Generator().manual_seed(0)
    b = min(batch_size, min(int(c.n_train.min()) for c in fed.cohorts))
    parts = []
    for cohort in fed.cohorts:
        thetas = cohort.init_thetas(0)
        n_min = int(cohort.n_train.min())
        idx = torch.stack([torch.randperm(n_min, generator=gen)[:b] for _ in range(cohort.size)])
        idx = idx.to(thetas.device)
        rows = torch.arange(cohort.size, device=idx.device)[:, None]
        ones = torch.ones(idx.shape, device=idx.device)
        parts.append((cohort, thetas, idx, (cohort.x_train[rows, idx], cohort.y_train[rows, idx], ones)))

    def loop() -> list[torch.Tensor]:
        return [
            torch.stack([ref.client_gradient(fed, int(i), t[k], idx[k]) for k, i in enumerate(c.clients)])
            for c, t, idx, _ in parts
        ]

    def batched() -> list[torch.Tensor]:
        return [c.gradients(thetas, batch)[0] for c, thetas, _, batch in parts]

    cuda = device.startswith("cuda")
    tf32 = torch.backends.cudnn.allow_tf32
    if cuda:
        torch.backends.cudnn.allow_tf32 = False
    try:
        looped = loop()  # also the warm-up of both paths
        err = max(
            float((g - ref_g).abs().max() / ref_g.abs().max())
            for g, ref_g in zip(batched(), looped, strict=True)
        )
        pairs = [(timed(batched, device), timed(loop, device)) for _ in range(repeats)]  # interleaved:
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    t_vmap = statistics.median(t for t, _ in pairs)  # slow drifts of a shared machine hit both alike
    t_loop = statistics.median(t for _, t in pairs)
    out: dict[str, Any] = {
        "model": model,
        "clients": clients,
        "cohort_sizes": [c.size for c in fed.cohorts],
        "batch_size": b,
        "dim": fed.cohorts[0].dim if len(fed.cohorts) == 1 else [c.dim for c in fed.cohorts],
        "group": [getattr(c, "group", GROUP_CLIENTS) for c in fed.cohorts],
        "cudnn_tf32": False if cuda else None,
        "vmap_s": t_vmap,
        "loop_s": t_loop,
        "speedup": statistics.median(loop_t / vmap_t for vmap_t, loop_t in pairs),
        "max_rel_diff": err,
    }
    if len(fed.cohorts) == 1:
        cohort = fed.cohorts[0]
        out["roofline"] = cohort_roofline(
            cohort.module, s.feature_shape, b, clients, t_loop, device,
            group=getattr(cohort, "group", GROUP_CLIENTS),
        )
    return out


# ----------------------------------------------------------------------------------------- scaling


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
    for sweep, s in tqdm(points, desc="scaling sweep", unit="setting"):
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


def plot_scaling(points: list[dict[str, Any]], bandwidth: float, path: Path) -> dict[str, dict[str, float]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fits = {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, sweep, key, label in (
        (axes[0], "edges", "edges", "undirected edges |E|"),
        (axes[1], "map_size", "map_elements_per_half_edge", "map size d_ij * d_i (elements)"),
    ):
        pts = [p for p in points if p["sweep"] == sweep]
        x = [float(p[key]) for p in pts]
        y = [p["s_per_round"] for p in pts]
        fit = linear_fit(x, y)
        fits[sweep] = fit
        xs = np.linspace(0, max(x) * 1.05, 50)
        ax.plot(x, y, "o", label="sim.step()")
        ax.plot(
            xs,
            fit["intercept"] + fit["slope"] * xs,
            "-",
            label=f"fit: {fit['intercept'] * 1e3:.1f} ms + {fit['slope']:.3g} s/unit (R²={fit['r2']:.3f})",
        )
        ax.plot(x, [2 * p["map_bytes"] / bandwidth for p in pts], "k--", label="floor 2·bytes(P)/BW")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds per round")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Sheaf-FMTL round time vs map volume")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fits


# ------------------------------------------------------------------------------------------ report


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    try:
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
        info["ram_gib"] = round(kib / (1 << 20), 1)
    except (OSError, StopIteration):
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def kernel_version() -> dict[str, Any]:
    """Which library kernel was measured: git commit, dirty flag, hash of the kernel files."""
    pkg = Path(__file__).resolve().parents[1]
    files = [pkg / "algorithms" / "sheaf_fmtl.py", pkg / "sheaf" / "ops.py"]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files if f.exists())).hexdigest()[:12]
    out: dict[str, Any] = {"kernel_sha256": digest}
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(pkg), *args], capture_output=True, text=True, check=True
            ).stdout.strip()

        out["commit"] = git("rev-parse", "HEAD")
        out["branch"] = git("rev-parse", "--abbrev-ref", "HEAD")
        out["kernel_files_dirty"] = bool(git("status", "--porcelain", "--", *map(str, files)))
    except (OSError, subprocess.CalledProcessError):
        out["commit"] = "unknown"
    return out


def summarize(r: dict[str, Any], bandwidth: float) -> dict[str, float]:
    maps = r["bytes"]["maps"]
    floor = 2 * maps / bandwidth
    peak = r.get("peak_device_bytes", r["peak_rss"] - r["rss_after_imports"])
    round_s = r["gradients_s"] + r["map_work_s"]  # folds amortised (a median of sim.step() may skip them)
    return {
        "floor_s": floor,
        "floor_ratio": r["map_work_s"] / floor,  # the target: map work within 2x of the floor
        "round_s": round_s,
        "round_floor_ratio": round_s / floor,
        "speedup": r["reference"]["s_per_round"] / round_s,
        "memory_ratio": peak / r["bytes"]["total"],
        "peak_bytes": peak,
        "memory_ratio_raw": r["peak_rss"] / r["bytes"]["total"],
    }


def _gb(n: float) -> str:
    return f"{n / GiB:.3f}" if n < 10 * GiB else f"{n / GiB:.1f}"


def cohort_lines(c: dict[str, Any]) -> list[str]:
    model = c.get("model", "cnn")
    sizes = c.get("cohort_sizes", [c["clients"]])
    who = f"{c['clients']} {model} clients"
    if len(sizes) > 1:
        who = f"{c['clients']} clients ({model}: cohorts of {sizes})"
    lines = [
        f"cohort: {who} (d={c['dim']}), batch {c['batch_size']}: batched "
        f"Cohort.gradients {c['vmap_s'] * 1e3:.1f} ms vs per-client autograd loop {c['loop_s'] * 1e3:.1f} ms"
        f" -> speed-up {c['speedup']:.1f}x (max rel diff {c['max_rel_diff']:.1e})"
    ]
    if "roofline" in c:
        roof = c["roofline"]
        group = c.get("group", [GROUP_CLIENTS])[0]
        lines.append(
            f"cohort roofline ({model}): {roof['gradient_gflop']:.1f} GFLOP per call; the loop runs at "
            f"{roof['loop_gflops']:.0f} GFLOP/s, a GEMM of the largest layer's shape at "
            f"{roof['gemm_gflops']:.0f} GFLOP/s -> no batching can beat the loop by more than "
            f"{roof['best_speedup']:.1f}x here; at the rate of its batched forward/backward products "
            f"({roof['bmm_gflops']:.0f} GFLOP/s, {group} clients per bmm) by more than "
            f"{roof['bmm_speedup']:.1f}x"
        )
    return lines


# The targets (issue 14, on a GPU): map work / floor, reference s / library s, cohort speed-up.
TARGETS = {"floor_ratio": ("<=", 1.5), "speedup": (">=", 50.0), "cohort_speedup": (">=", 5.0)}


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Every ratio of a bench run with the numbers behind it and whether it meets the issue's target
    (``ratios.json``)."""
    def verdict(key: str, value: float) -> bool:
        op, bound = TARGETS[key]
        return value <= bound if op == "<=" else value >= bound

    out: dict[str, Any] = {
        "device": results["device"],
        "gpu": results["machine"].get("gpu"),
        "bandwidth_GBps": results["bandwidth_bytes_per_s"] / 1e9,
        "targets": {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()},
        "settings": {},
        "cohorts": {},
    }
    for name, r in results["settings"].items():
        m = r["summary"]
        out["settings"][name] = {
            "maps_GiB": r["bytes"]["maps"] / GiB,
            "map_dtype": r["setting"]["map_dtype"],
            "floor_s": m["floor_s"],
            "map_work_s": r["map_work_s"],
            "floor_ratio": m["floor_ratio"],
            "floor_ratio_ok": verdict("floor_ratio", m["floor_ratio"]),
            "gradients_s": r["gradients_s"],
            "round_s": m["round_s"],
            "median_step_s": r["s_per_round"],
            "reference_s": r["reference"]["s_per_round"],
            "reference_subset": r["reference"]["subset"],
            "speedup": m["speedup"],
            "speedup_ok": verdict("speedup", m["speedup"]),
            "memory_ratio": m["memory_ratio"],
            "build_s": r["build_s"],
        }
    mk = results.get("map_kernels")
    if mk:
        bw = results["bandwidth_bytes_per_s"] / 1e9
        out["map_kernels"] = {
            name: {"GBps": f["GBps"], "of_copy_bandwidth": f["GBps"] / bw} for name, f in mk["forms"].items()
        }
    for model, c in results.get("cohorts", {}).items():
        out["cohorts"][model] = {
            "batched_s": c["vmap_s"],
            "loop_s": c["loop_s"],
            "speedup": c["speedup"],
            "speedup_ok": verdict("cohort_speedup", c["speedup"]),
            "max_rel_diff": c["max_rel_diff"],
            **({"roofline_best_speedup": c["roofline"]["best_speedup"]} if "roofline" in c else {}),
        }
    return out


def report(results: dict[str, Any]) -> str:
    bw = results["bandwidth_bytes_per_s"]
    lines = [
        f"kernel: commit {results['kernel'].get('commit', '?')[:12]} "
        f"(sheaf_fmtl.py+ops.py sha256 {results['kernel']['kernel_sha256']}"
        f"{', uncommitted changes' if results['kernel'].get('kernel_files_dirty') else ''}); "
        f"machine: {results['machine'].get('cpu', '?')}, {results['machine']['cpus']} cpus, "
        f"{results['machine'].get('ram_gib', '?')} GiB; device {results['device']}",
        f"copy bandwidth (2*bytes/t, read+write; faster of start and end): {bw / 1e9:.1f} GB/s; torch "
        f"threads {results['machine']['threads']}; "
        f"load average at start {results['load_average_start'][0]:.1f}, "
        f"at end {results['load_average_end'][0]:.1f} (other processes share the cores when above 0)",
        "",
        f"{'setting':<12} {'|E|':>4} {'d_i':>7} {'d_ij':>5} {'maps GiB':>9} {'floor s':>8} {'map s':>8} "
        f"{'R':>6} {'s/round':>8} {'ref s/rnd':>9} {'S':>6} {'peak GiB':>9} {'bound GiB':>9} {'M':>5}",
    ]
    for name, r in results["settings"].items():
        m = r["summary"]
        lines.append(
            f"{name:<12} {r['num_edges']:>4} {','.join(map(str, r['node_dims'])):>7} "
            f"{','.join(map(str, r['edge_dims'])):>5} {_gb(r['bytes']['maps']):>9} {m['floor_s']:>8.4f} "
            f"{r['map_work_s']:>8.4f} {m['floor_ratio']:>6.2f} {m['round_s']:>8.4f} "
            f"{r['reference']['s_per_round']:>9.4f} "
            f"{m['speedup']:>6.1f} {_gb(m['peak_bytes']):>9} {_gb(r['bytes']['total']):>9} "
            f"{m['memory_ratio']:>5.2f}"
        )
    for name, r in results["settings"].items():
        ref_ = r["reference"]
        if ref_["subset"]:
            lines.append(
                f"note: {name}: the loop reference was timed on {ref_['edges_timed']} of "
                f"{ref_['edges_total']} edges ({_gb(ref_['map_bytes_timed'])} GiB of maps; all maps twice "
                f"would not fit) and its edge time scaled by {ref_['edge_scale']:.2f} (map bytes)"
            )
        m = r["summary"]
        lines.append(
            f"      {name}: round = {r['gradients_s']:.4f} s local gradients + {r['map_work_s']:.4f} s "
            f"map work (sheaf term, messages, exchanges, map step and folds; gradients frozen) = "
            f"{m['round_floor_ratio']:.2f} x floor; median sim.step() {r['s_per_round']:.4f} s"
        )
        lines.append(
            f"      {name}: loop reference = {ref_['gradient_s']:.4f} s per-client autograd gradients + "
            f"{ref_['edge_s']:.4f} s per-edge loop; peak RSS {_gb(r['peak_rss'])} GiB incl. "
            f"{_gb(r['rss_after_imports'])} GiB interpreter+torch (M excludes it)"
        )
    lines.append("")
    cohorts = results.get("cohorts") or ({"cnn": results["cohort"]} if "cohort" in results else {})
    for c in cohorts.values():
        lines += cohort_lines(c)
    for sweep, fit in results.get("scaling_fits", {}).items():
        lines.append(
            f"scaling vs {sweep}: t = {fit['intercept'] * 1e3:.2f} ms + {fit['slope']:.3g} s/unit, "
            f"R^2 = {fit['r2']:.3f}"
        )
    lines.append("")
    for name, r in results["settings"].items():
        m = r["summary"]
        lines.append(
            f"{name}: floor ratio {m['floor_ratio']:.2f}, speed-up {m['speedup']:.1f}, "
            f"memory ratio {m['memory_ratio']:.2f}"
        )
    mk = results.get("map_kernels")
    if mk:
        lines.append(f"map products on {mk['shape']} float32 maps ({_gb(mk['bytes'])} GiB), bytes moved / s:")
        lines += [f"  {name:<34} {f['GBps']:8.1f} GB/s" for name, f in mk["forms"].items()]
    for what, why in results.get("failed", {}).items():
        lines.append(f"FAILED {what}: {why}")
    return "\n".join(lines)


def run_bench(
    quick: bool = False,
    device: str = "cpu",
    out: str | Path = "runs/bench",
    setting_list: list[Setting] | None = None,
    cohort_clients: int = COHORT_CLIENTS,
    scaling: bool = True,
    threads: int | None = None,
    smoke: bool = False,
    cohort_models: tuple[str, ...] = ("cnn",),
    map_init_on_device: bool = False,
    keep_going: bool = False,
    kernels: bool = False,
) -> dict[str, Any]:
    """Everything: bandwidth, settings (each in a fresh process), cohorts, scaling; JSON + PNG in ``out``.

    ``smoke``: tiny settings that finish in seconds (tests); ``threads``: torch threads everywhere;
    ``cohort_models``: one cohort benchmark per entry (an architecture or a comma list);
    ``map_init_on_device``: draw the settings' maps on the device (see :class:`Setting`);
    ``keep_going``: a setting or cohort that fails is recorded in ``failed`` and the rest still run;
    ``kernels``: also time the ways to take the map products (:func:`map_kernels`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run_bench(
            quick, device, out, setting_list, cohort_clients, scaling, threads, smoke, cohort_models,
            map_init_on_device, keep_going, kernels,
        )
    finally:
        torch.set_num_threads(previous_threads)


def _run_bench(
    quick: bool,
    device: str,
    out: Path,
    setting_list: list[Setting] | None,
    cohort_clients: int,
    scaling: bool,
    threads: int | None,
    smoke: bool,
    cohort_models: tuple[str, ...] = ("cnn",),
    map_init_on_device: bool = False,
    keep_going: bool = False,
    kernels: bool = False,
) -> dict[str, Any]:
    if smoke:
        setting_list = setting_list or SMOKE
        cohort_clients = min(cohort_clients, 4)
    results: dict[str, Any] = {
        "quick": quick,
        "smoke": smoke,
        "device": device,
        "machine": machine(),
        "kernel": kernel_version(),
        "load_average_start": os.getloadavg(),
        "failed": {},
    }

    def attempt(what: str, fn: Any) -> Any:
        """``fn()``; with ``keep_going`` a failure is recorded (and printed) instead of raised."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - keep_going: record and continue
            if not keep_going:
                raise
            results["failed"][what] = f"{type(e).__name__}: {e}"
            print(f"[bench] FAILED {what}: {type(e).__name__}: {e}", file=sys.stderr)
            return None

    def checkpoint() -> None:  # partial results survive a run that is stopped later
        (out / "bench.json").write_text(json.dumps(results, indent=2, default=str))

    bw_bytes = (256 << 20) if quick or smoke else (1 << 30)
    bandwidth = copy_bandwidth(bw_bytes, device)
    print(f"[bench] copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write) on {device}", file=sys.stderr)
    results["bandwidth_bytes_per_s"] = bandwidth
    results["bandwidth_tensor_bytes"] = bw_bytes
    if kernels:
        small = {"half_edges": 4, "edge_dim": 32, "node_dim": 4000} if quick or smoke else {}
        results["map_kernels"] = attempt("map kernels", lambda: map_kernels(device, **small))
        checkpoint()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the settings run in child processes: leave them the memory
    results["settings"] = {}
    for s in setting_list if setting_list is not None else settings(quick):
        s = for_device(dataclasses.replace(s, map_init_on_device=map_init_on_device), device)
        print(f"[bench] setting {s.name}: {s.clients} clients, {s.model}, gamma={s.gamma}", file=sys.stderr)
        t0 = time.perf_counter()
        r = attempt(f"setting {s.name}", lambda s=s: run_setting_subprocess(s, device, threads))
        if r is None:
            continue
        r["summary"] = m = summarize(r, bandwidth)
        results["settings"][s.name] = r
        print(
            f"[bench] setting {s.name} done in {time.perf_counter() - t0:.1f} s: maps "
            f"{_gb(r['bytes']['maps'])} GiB, floor {m['floor_s']:.4f} s, map work {r['map_work_s']:.4f} s "
            f"(R {m['floor_ratio']:.2f}), round {m['round_s']:.4f} s, loop reference "
            f"{r['reference']['s_per_round']:.4f} s (S {m['speedup']:.1f})",
            file=sys.stderr,
        )
        checkpoint()
    results["cohorts"] = {}
    for model in cohort_models:
        print(f"[bench] cohort gradients ({model})", file=sys.stderr)
        t0 = time.perf_counter()
        c = attempt(
            f"cohort {model}",
            lambda model=model: cohort_benchmark(
                cohort_clients, repeats=1 if smoke else 7, device=device, model=model
            ),
        )
        if c is None:
            continue
        results["cohorts"][model] = c
        print(f"[bench] cohort {model} done in {time.perf_counter() - t0:.1f} s: speed-up "
              f"{c['speedup']:.1f}x", file=sys.stderr)
        checkpoint()
    if results["cohorts"]:
        results["cohort"] = next(iter(results["cohorts"].values()))
    if scaling:
        def sweep() -> None:
            results["scaling"] = scaling_sweep(quick or smoke, device, smoke)
            results["scaling_fits"] = plot_scaling(results["scaling"], bandwidth, out / "scaling.png")

        attempt("scaling", sweep)
    # The copy bandwidth is measured again at the end; the floor uses the faster of the two, so that
    # a copy slowed down by a passing load cannot make the floor look easy.
    results["bandwidth_bytes_per_s_end"] = copy_bandwidth(bw_bytes, device)
    results["bandwidth_bytes_per_s"] = max(bandwidth, results["bandwidth_bytes_per_s_end"])
    for r in results["settings"].values():
        r["summary"] = summarize(r, results["bandwidth_bytes_per_s"])
    results["load_average_end"] = os.getloadavg()
    results["report"] = report(results)
    results["ratios"] = ratios(results)
    (out / "bench.json").write_text(json.dumps(results, indent=2))
    (out / "ratios.json").write_text(json.dumps(results["ratios"], indent=2))
    return results
