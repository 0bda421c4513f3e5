"""A literal, per-client and per-edge Python-loop implementation of Algorithm 1 (the oracle and
the "naive" timing reference of the benchmark).

Round ``k`` (paper Algorithm 1, synchronous):

1. every client ``i`` sends ``P_ij theta_i`` to each neighbour ``j``;
2. theta step (eq. (18) ``thetaupdate``):
   ``theta_i <- theta_i - alpha (g_i + lam sum_j P_ij^T (P_ij theta_i - P_ji theta_j))``;
3. every client sends ``P_ij theta_i^{new}``;
4. map step (eq. (19) ``pijaupdate``), with ``torch.outer``:
   ``P_ij <- P_ij - eta lam (P_ij theta_i - P_ji theta_j) theta_i^T``.

On a weighted graph each edge's terms are scaled by ``a_ij`` (``weights[(i, j)]``; 1 when absent):
``a_ij P_ij^T (...)`` in step 2, ``eta lam a_ij (...) theta_i^T`` in step 4.

State lives in Python dicts (``thetas[i]``, ``maps[(i, j)] = P_ij``) copied from a
:class:`~sheaf_fmtl.runtime.engine.simulate.Simulation`; gradients ``g_i`` come from a per-client
autograd loop (:func:`client_gradient`) with the library's loss (mean loss + ``l2/2 ||theta||^2``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch.func import functional_call

from ..federation import Cohorts
from ..runtime.engine.simulate import Simulation

Edge = tuple[int, int]
GradientFn = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass
class ReferenceState:
    """Per-client thetas and per-directed-edge maps ``P_ij`` (``[d_ij, d_i]``), plain dicts."""

    thetas: dict[int, torch.Tensor]
    maps: dict[Edge, torch.Tensor]
    neighbours: dict[int, list[int]] = field(default_factory=dict)
    weights: dict[Edge, float] = field(default_factory=dict)  # a_ij of a weighted graph (1 when absent)

    def __post_init__(self) -> None:
        if not self.neighbours:
            nbrs: dict[int, list[int]] = {i: [] for i in self.thetas}
            for i, j in self.maps:
                nbrs[i].append(j)
            self.neighbours = {i: sorted(js) for i, js in nbrs.items()}

    def map_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.maps.values())


def sheaf_state(sim: Simulation[Any]) -> Any:
    """The simulation's Sheaf-FMTL state (``thetas``, ``maps`` per bucket ``[H_b, d_e, d]``, ``layout``);
    typed loosely so the harness follows whatever state class the kernel uses."""
    return sim.state


def client_theta(sim: Simulation[Any], i: int) -> torch.Tensor:
    fed = sim.ctx.fed
    return cast("torch.Tensor", sim.state.thetas[int(fed.cohort_of[i])][int(fed.position[i])])


def from_simulation(sim: Simulation[Any], edges: Iterable[int] | None = None) -> ReferenceState:
    """Copy thetas (all clients) and the maps of ``edges`` (undirected edge ids; default: all)
    out of the library's stacked state (``maps[b][k]`` is the map of half-edge ``b.half_edges[k]``)."""
    layout, maps = sheaf_state(sim).layout, sheaf_state(sim).maps
    graph = sim.ctx.graph
    keep = set(range(graph.num_edges)) if edges is None else {int(e) for e in edges}
    thetas = {i: client_theta(sim, i).detach().clone() for i in range(graph.num_nodes)}
    out: dict[Edge, torch.Tensor] = {}
    for b, stack in zip(layout.buckets, maps, strict=True):
        for k, h in enumerate(b.half_edges.tolist()):
            if h // 2 in keep:
                out[(int(graph.src[h]), int(graph.dst[h]))] = stack[k].detach().to(torch.float32).clone()
    weights = {}
    if graph.weighted:
        assert graph.weights is not None
        for (i, j), a in zip(graph.edges.tolist(), graph.weights.tolist(), strict=True):
            if (i, j) in out:
                weights[(i, j)] = weights[(j, i)] = float(a)
    return ReferenceState(thetas, out, weights=weights)


def client_gradient(
    fed: Cohorts, i: int, theta: torch.Tensor, batch: torch.Tensor | None = None
) -> torch.Tensor:
    """``grad f_i(theta)`` by plain autograd on client ``i`` alone: mean per-sample loss over its
    training rows (``batch``: row indices; default all) plus ``l2/2 ||theta||^2``."""
    cohort = fed.cohorts[int(fed.cohort_of[i])]
    k = int(fed.position[i])
    # The row count from the host (a batch's length, or a host copy of n_i): reading n_train on a
    # GPU would synchronise once per client and slow the loop down for no reason of its own.
    n = len(batch) if batch is not None else int(_host_counts(cohort)[k])
    rows = torch.arange(n, device=theta.device) if batch is None else batch
    x, y = cohort.x_train[k, rows], cohort.y_train[k, rows]
    theta = theta.detach().requires_grad_(True)
    out = functional_call(cohort.module, cohort.unflatten(theta), (x,))
    if cohort.task == "classification":
        data = F.cross_entropy(out, y, reduction="mean") if n else out.sum() * 0
    else:
        data = ((out.squeeze(-1) - y) ** 2).mean() if n else out.sum() * 0
    loss = data + (0.5 * cohort.l2 * (theta * theta).sum() if n else 0.0)
    (g,) = torch.autograd.grad(loss, theta)
    return g


def _host_counts(cohort: Any) -> torch.Tensor:
    """``n_i`` of a cohort's clients on the CPU (the cohort's own host copy when it keeps one)."""
    host = getattr(cohort, "n_host", None)
    return host if isinstance(host, torch.Tensor) else cohort.n_train.cpu()


def full_batch_gradients(fed: Cohorts) -> GradientFn:
    return lambda i, theta: client_gradient(fed, i, theta)


def minibatch_gradients(fed: Cohorts, batch_size: int, seed: int = 0) -> GradientFn:
    """Per-client autograd gradients on ``batch_size`` random rows (for timing: not the library's batches)."""
    gen = torch.Generator().manual_seed(seed)
    counts = [_host_counts(c).tolist() for c in fed.cohorts]  # once: no device read per client

    def grad(i: int, theta: torch.Tensor) -> torch.Tensor:
        n = int(counts[int(fed.cohort_of[i])][int(fed.position[i])])
        if batch_size <= 0 or batch_size >= n:
            return client_gradient(fed, i, theta)
        rows = torch.randperm(n, generator=gen)[:batch_size]
        return client_gradient(fed, i, theta, rows.to(theta.device, non_blocking=True))

    return grad


def theta_step(state: ReferenceState, grads: dict[int, torch.Tensor], lam: float, alpha: float) -> None:
    """Steps 1-2: messages ``P_ij theta_i``, then eq. (18) ``thetaupdate`` for every client."""
    msg = {(i, j): p @ state.thetas[i] for (i, j), p in state.maps.items()}
    new = {}
    for i, theta in state.thetas.items():
        coupling = torch.zeros_like(theta)
        for j in state.neighbours[i]:
            a = state.weights.get((i, j), 1.0)
            coupling += a * state.maps[(i, j)].T @ (msg[(i, j)] - msg[(j, i)])
        new[i] = theta - alpha * (grads[i] + lam * coupling)
    state.thetas = new


def map_step(state: ReferenceState, lam: float, eta: float) -> None:
    """Steps 3-4: messages with the new thetas, then eq. (19) ``pijaupdate``, an explicit outer product."""
    msg = {(i, j): p @ state.thetas[i] for (i, j), p in state.maps.items()}
    for (i, j), p in state.maps.items():
        a = state.weights.get((i, j), 1.0)
        p -= eta * lam * a * torch.outer(msg[(i, j)] - msg[(j, i)], state.thetas[i])


def reference_round(
    state: ReferenceState, gradient: GradientFn, lam: float, alpha: float, eta: float
) -> None:
    """One synchronous round of Algorithm 1 (``local_steps = 1``); ``eta = 0`` keeps maps fixed."""
    grads = {i: gradient(i, theta) for i, theta in state.thetas.items()}
    theta_step(state, grads, lam, alpha)
    if eta > 0 and lam > 0:
        map_step(state, lam, eta)


@dataclass(frozen=True)
class CheckResult:
    rounds: int
    theta_max_abs: float
    theta_rel: float  # max abs difference / max abs value
    map_max_abs: float
    map_rel: float

    @property
    def ok(self) -> bool:
        return self.theta_rel < 1e-5 and self.map_rel < 1e-5


def compare(sim: Simulation[Any], state: ReferenceState) -> tuple[float, float, float, float]:
    """Max abs and relative differences of thetas and maps between the library and the reference."""
    theta_d = theta_m = map_d = map_m = 0.0
    for i, t in state.thetas.items():
        lib = client_theta(sim, i).to(t)
        theta_d = max(theta_d, float((lib - t).abs().max()))
        theta_m = max(theta_m, float(t.abs().max()))
    ref = from_simulation(sim)
    for key, p in state.maps.items():
        q = ref.maps[key].to(p)
        map_d = max(map_d, float((q - p).abs().max()))
        map_m = max(map_m, float(p.abs().max()))
    return theta_d, theta_d / max(theta_m, 1e-30), map_d, map_d / max(map_m, 1e-30)


def check_against_library(sim: Simulation[Any], rounds: int = 5) -> CheckResult:
    """Run ``rounds`` of ``sim.step()`` and of :func:`reference_round` from the same initial state
    with full-batch gradients (the simulation's config must have ``batch_size = 0``)."""
    cfg = sim.config
    if cfg.batch_size != 0:
        raise ValueError("the reference check needs deterministic gradients: use batch_size=0 (full batch)")
    if cfg.local_steps != 1:
        raise ValueError("the reference loop implements local_steps = 1")
    state = from_simulation(sim)
    grad = full_batch_gradients(sim.ctx.fed)
    for _ in range(rounds):
        sim.step()
        reference_round(state, grad, cfg.lam_value, cfg.alpha, cfg.eta)
    return CheckResult(rounds, *compare(sim, state))
