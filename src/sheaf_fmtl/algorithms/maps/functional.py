"""Sheaf-FMTL with nonlinear restriction maps given by what the models compute: ``maps = functional``.

Each edge ``e = {i, j}`` and round ``t`` has a probe batch ``X_(e,t)`` of ``B = probe_size`` inputs
that both ends draw from ``(seed, e, t)`` (:mod:`sheaf_fmtl.sheaf.probes`: seeded noise shaped like
the inputs, so no data leaves a client, or rows of the unlabelled pool ``probe_data``). The maps are
the models' outputs on it,
    ``P_ij(theta_i) = f_theta_i(X_(e,t)) / sqrt(B)``,
so any two architectures with the same inputs and outputs are compared by function, not by
parameters. Tabular clients that see different features (feature ids known) take their own columns
of a probe over the shared feature space.

Energy ``lam/2 sum_e a_e ||P_ij(theta_i) - P_ji(theta_j)||^2``; its gradient at ``theta_i`` is
``lam sum_j a_ij J_ij^T r_ij`` with ``J_ij`` the Jacobian of ``P_ij`` and ``r_ij = P_ij(theta_i) -
P_ji(theta_j)``, taken by autograd through the forward pass that made the message. Coupling step
(with ``local_epochs = E > 0`` after the ``E`` local passes with the local optimizer, without the
gradient and at the coupling's own step ``c``, :mod:`.coupling_step`):
    ``theta_i <- theta_i - alpha (g_i + lam sum_j a_ij J_ij^T r_ij)``.
Messages: ``B x outputs`` floats per half-edge and round. A message that did not arrive skips its
edge's terms. There is no start-up step-size check: the coupling's curvature depends on the models'
Jacobians, which change as they train.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import ConfigError, RunConfig
from ...config.registry import MapModeSpec
from ...data.base import DatasetError
from ...data.sizes import check_fits, stored_bytes
from ...federation import Cohorts
from ...messages import EdgeTensor, Payload
from ...sheaf.layout import SheafLayout, build_layout
from ...sheaf.probes import noise_probes, pool_rows
from ..protocol.algorithm import Algorithm, Context, PerSampleFlops, State, register_maps
from ..training.coupling_step import CouplingStep
from ..training.epoch import local_epochs
from ..training.steps import coupled_step

NOT_DATA = ("leaves", "outputs", "weights", "columns", "pool")


@dataclass
class FunctionalState(State):
    """Thetas, the layout (buckets of half-edges by source cohort), the round the probes are drawn
    from, and within a round the forward passes that made the messages (for ``J^T r``)."""

    layout: SheafLayout | None = None
    round: int = 0
    grads: list[torch.Tensor] | None = None
    leaves: list[torch.Tensor] | None = field(default=None, repr=False)  # per cohort, requires grad
    outputs: list[torch.Tensor] | None = field(default=None, repr=False)  # per bucket [H_b, B K]
    weights: list[torch.Tensor] | None = field(default=None, repr=False)  # per bucket [H_b] a_ij, weighted
    columns: list[torch.Tensor] | None = field(default=None, repr=False)  # per bucket [H_b, w] feature ids
    pool: torch.Tensor | None = field(default=None, repr=False)  # probe_data [P, ...]

    def checkpoint(self) -> dict[str, Any]:
        """The data fields but the round's forward passes and what ``init`` rebuilds."""
        return {k: v for k, v in super().checkpoint().items() if k not in NOT_DATA}

    def flop_terms(
        self, config: RunConfig, fed: Cohorts, samples: list[int], rounds: int, per_sample: PerSampleFlops
    ) -> tuple[int | None, int | None]:
        """The coupling: per held half-edge and coupling step, one forward and backward pass of its
        source's model on each of the ``probe_size`` probe inputs (the message's forward is the one
        the step differentiates; the energy reported at evaluations is not training)."""
        assert self.layout is not None
        steps = 1 if config.local_epochs > 0 else config.local_steps
        total = 0
        for b in self.layout.buckets:
            cohort = fed.cohorts[b.cohort]
            per = per_sample(cohort.module, cohort.feature_shape, cohort.task, cohort.loss_fn)
            total += b.size * config.probe_size * per
        return None, total * steps * rounds


def probe_shape(ctx: Context) -> tuple[tuple[int, ...], list[np.ndarray] | None]:
    """The shape of one probe input, and (tabular clients of different widths) each client's columns
    of it; refuses an edge whose two ends take inputs of different shapes."""
    fed, graph = ctx.fed, ctx.graph
    shapes = [tuple(fed.dataset.feature_shape(i)) for i in range(fed.num_clients)]
    if len(set(shapes)) == 1:
        return shapes[0], None
    features = fed.dataset.features
    if features is not None and all(len(s) == 1 for s in shapes):
        width = int(max(int(np.max(f)) for f in features if len(f))) + 1
        return (width,), [np.asarray(f, np.int64) for f in features]
    for i, j in graph.edges.tolist():
        if shapes[i] != shapes[j]:
            raise ConfigError(
                f"maps=functional compares outputs on one probe batch, but clients {i} and {j} take inputs "
                f"of shapes {shapes[i]} and {shapes[j]}; use maps=proxy or maps=aligned"
            )
    return shapes[0], None


def load_pool(path: str, shape: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    """``probe_data``: a ``.npy`` array of inputs ``[P, *shape]`` (or an ``.npz`` with ``x``)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(
            f"config key 'probe_data' = {path}: no such file (expected a .npy or .npz of inputs)"
        )
    try:
        need = stored_bytes(file) * 2  # (and its float32 copy): from the headers, before any data
    except DatasetError as e:
        raise ConfigError(
            f"config key 'probe_data' = {path}: not a .npy array or .npz with x ({e})"
        ) from None
    try:
        check_fits(need, f"config key 'probe_data' = {path}", "give a smaller pool")
    except DatasetError as e:
        raise ConfigError(str(e)) from None
    try:
        loaded = np.load(file, allow_pickle=False)
        array = loaded["x"] if isinstance(loaded, np.lib.npyio.NpzFile) else loaded
    except (ValueError, KeyError, OSError) as err:
        raise ConfigError(
            f"config key 'probe_data' = {path}: not a .npy array or .npz with x ({err})"
        ) from err
    if array.ndim < 1 or tuple(array.shape[1:]) != shape or len(array) == 0:
        raise ConfigError(
            f"config key 'probe_data' = {path} holds inputs of shape {tuple(array.shape)}; the models take "
            f"[P, {', '.join(map(str, shape))}] (P >= 1 rows of one sample's shape)"
        )
    if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.complexfloating):
        raise ConfigError(f"config key 'probe_data' = {path} holds {array.dtype} values; give real numbers")
    with np.errstate(over="ignore"):  # (a value beyond float32 becomes inf: refused below)
        pool = np.asarray(array, np.float32)
    if not np.isfinite(pool).all():  # (would surface rounds later as a divergence blamed on step sizes)
        bad = int(np.flatnonzero(~np.isfinite(pool).reshape(len(pool), -1).all(axis=1))[0])
        raise ConfigError(
            f"config key 'probe_data' = {path}: row {bad} holds a NaN or infinite value (or one beyond "
            "float32); give finite inputs"
        )
    return torch.as_tensor(pool, device=device)


@dataclass(frozen=True)
class ProbeKeys(Keys):
    """``maps = functional``: the probe batches."""

    probe_size: int = key(
        32,
        "`maps=functional`: inputs per probe batch `B`; `B x outputs` floats per message.",
        rule="probe_size >= 1",
    )
    probe_data: str = key(
        "",
        "`maps=functional`: a `.npy` of unlabelled inputs `[P, ...]` (or `.npz` with `x`) the probes are "
        "drawn from; empty: seeded Gaussian noise shaped like the inputs (no data leaves a client).",
    )


@register_maps(MapModeSpec("functional", "functional maps", 1.0, keys=(ProbeKeys,)))
class FunctionalSheaf(Algorithm[FunctionalState]):
    """``algorithm = sheaf-fmtl`` with ``maps = functional`` (see the module docstring)."""

    name = "sheaf-fmtl"

    def __init__(self, config: RunConfig) -> None:
        self.lam, self.alpha, self.seed = config.lam_value, config.alpha, config.seed
        self.size, self.local_steps = config.probe_size, config.local_steps
        self.probe_data = config.probe_data
        self.shape: tuple[int, ...] = ()
        self.coupling = CouplingStep(config, self.lam)  # the step after the local epochs (coupling_step.py)

    # -- start-up ---------------------------------------------------------------------------------
    def init(self, ctx: Context) -> FunctionalState:
        fed, graph = ctx.fed, ctx.graph
        thetas = ctx.init_thetas()
        dev = thetas[0].device
        self.shape, columns = probe_shape(ctx)
        outputs = fed.dataset.num_classes if fed.task == "classification" else 1
        edge_dims = np.full(graph.num_edges, self.size * outputs, np.int64)
        layout = build_layout(
            graph, fed.node_dims().tolist(), fed.cohort_of.tolist(), 1.0, edge_dim_override=edge_dims
        )
        state = FunctionalState(thetas=thetas, layout=layout)
        if self.probe_data:
            state.pool = load_pool(self.probe_data, self.shape, dev)
        if columns is not None:
            state.columns = [
                torch.as_tensor(np.stack([columns[int(graph.src[h])] for h in b.half_edges]), device=dev)
                for b in layout.buckets
            ]
        if graph.weighted:
            a = graph.half_edge_weights()
            state.weights = [
                torch.as_tensor(a[b.half_edges], dtype=thetas[0].dtype, device=dev) for b in layout.buckets
            ]
        for k, b in enumerate(layout.buckets):  # every model must take the probes (one line if not)
            cohort = fed.cohorts[b.cohort]
            try:
                with torch.no_grad():
                    out = cohort._predict(thetas[b.cohort][:1], self._inputs(state, k, 0)[:1])
            except (RuntimeError, TypeError, ValueError) as err:
                first = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise ConfigError(
                    f"maps=functional: model {cohort.model_name} of client {int(cohort.clients[0])} has no "
                    f"forward over inputs of shape {list(self.shape)} ({first})"
                ) from err
            if out.shape[-1] != outputs or out.shape[1] != self.size:
                raise ConfigError(
                    f"maps=functional: model {cohort.model_name} gives outputs of shape "
                    f"{list(out.shape[1:])} on {self.size} probes; expected [{self.size}, {outputs}]"
                )
        self.coupling.start(ctx, lambda: math.inf)  # (no bound: the curvature moves with the Jacobians)
        return state

    # -- the maps ----------------------------------------------------------------------------------
    def _inputs(self, state: FunctionalState, k: int, round_: int) -> torch.Tensor:
        """``X_(e,t)`` for each half-edge of bucket ``k``, as its source takes them ``[H_b, B, ...]``."""
        assert state.layout is not None
        b = state.layout.buckets[k]
        edges = b.half_edges // 2
        dev = state.thetas[0].device
        if state.pool is not None:
            x = state.pool[pool_rows(self.seed, edges, round_, self.size, len(state.pool), dev)]
        else:
            x = noise_probes(self.seed, edges, round_, self.size, self.shape, dev)
        if state.columns is not None:
            cols = state.columns[k]
            x = torch.gather(x, 2, cols[:, None, :].expand(-1, self.size, -1))
        return x.to(state.thetas[b.cohort].dtype)

    def maps(
        self, state: FunctionalState, ctx: Context, round_: int, grad: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``(leaves, P)``: per cohort the thetas as autograd leaves, per bucket ``P_ij(theta_i)``
        ``[H_b, B K]`` on round ``round_``'s probes (differentiable when ``grad``)."""
        assert state.layout is not None
        leaves = [t.detach().requires_grad_(grad) for t in state.thetas]
        out = []
        with torch.set_grad_enabled(grad):
            for k, b in enumerate(state.layout.buckets):
                rows = leaves[b.cohort].index_select(0, b.src_pos_on(leaves[b.cohort].device))
                f = ctx.fed.cohorts[b.cohort]._predict(rows, self._inputs(state, k, round_))
                out.append(f.reshape(b.size, -1) / math.sqrt(self.size))
        return leaves, out

    # -- rounds ------------------------------------------------------------------------------------
    def local(self, state: FunctionalState, ctx: Context) -> FunctionalState:
        if ctx.epoch_mode:  # E passes with the local optimizer; the coupling step follows the exchange
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            state.grads = None
        else:
            state.grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
        return state

    def send(self, state: FunctionalState, phase: int, ctx: Context) -> Payload:
        assert state.layout is not None
        state.leaves, state.outputs = self.maps(state, ctx, state.round, grad=True)
        parts = [o.detach().reshape(-1) for o in state.outputs]
        flat = torch.cat(parts) if parts else state.thetas[0].new_zeros(0)
        return {"msg": EdgeTensor(flat, state.layout.messages)}

    def receive(self, state: FunctionalState, incoming: Payload, phase: int, ctx: Context) -> FunctionalState:
        layout = state.layout
        assert layout is not None and state.leaves is not None and state.outputs is not None
        msg = incoming["msg"]
        assert isinstance(msg, EdgeTensor)
        theirs = layout.bucket_messages(msg.data)
        held = None if msg.heard is None else [msg.heard[b.first : b.first + b.size] for b in layout.buckets]
        leaves, outs, grads = state.leaves, state.outputs, state.grads
        for step in range(1 if grads is None else self.local_steps):
            if step > 0:  # further local steps: fresh gradients, the maps at the current theta
                grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
                leaves, outs = self.maps(state, ctx, state.round, grad=True)
            pull = self._pull(state, leaves, outs, list(theirs), held)
            own_step = self.coupling.steps(state, state.thetas) if grads is None else None
            state.thetas = coupled_step(state.thetas, grads, pull, self.alpha, self.lam, own_step)
        state.leaves = state.outputs = state.grads = None
        state.round += 1
        return state

    def _pull(
        self,
        state: FunctionalState,
        leaves: list[torch.Tensor],
        outs: list[torch.Tensor],
        theirs: list[torch.Tensor],
        held: list[torch.Tensor] | None,
    ) -> list[torch.Tensor]:
        """``sum_j a_ij J_ij^T r_ij`` per cohort, over the neighbours heard: the gradient of
        ``1/2 sum_j a_ij ||P_ij(theta_i) - P_ji(theta_j)||^2`` (the neighbours' maps fixed)."""
        terms = []
        for k, (o, t) in enumerate(zip(outs, theirs, strict=True)):
            per = 0.5 * ((o - t) ** 2).sum(1)
            if state.weights is not None:
                per = per * state.weights[k]
            if held is not None:
                per = torch.where(held[k], per, per.new_zeros(()))
            terms.append(per.sum())
        if not terms:
            return [torch.zeros_like(t) for t in state.thetas]
        with torch.enable_grad():
            got = torch.autograd.grad(torch.stack(terms).sum(), leaves, allow_unused=True)
        return [torch.zeros_like(t) if g is None else g for t, g in zip(state.thetas, got, strict=True)]

    # -- reporting ---------------------------------------------------------------------------------
    def penalty(self, state: FunctionalState, ctx: Context) -> tuple[float, float]:
        """``(lam/2 E, E)`` with ``E = sum_e a_e ||P_ij(theta_i) - P_ji(theta_j)||^2`` on the coming
        round's probes, by an uncounted exchange of the maps."""
        layout = state.layout
        assert layout is not None
        _, outs = self.maps(state, ctx, state.round, grad=False)
        mine = torch.cat([o.reshape(-1) for o in outs]) if outs else state.thetas[0].new_zeros(0)
        theirs = ctx.comm.peek({"s": EdgeTensor(mine, layout.messages)})["s"].data
        per_half = torch.zeros(len(layout.order), dtype=torch.float64, device=mine.device)
        where = layout.messages.element_positions(mine.device)
        per_half.index_add_(0, where, (mine - theirs).double() ** 2)
        a = torch.as_tensor(
            layout.graph.half_edge_weights()[layout.order], dtype=torch.float64, device=mine.device
        )
        e = 0.5 * float(ctx.comm.all_sum((a * per_half).sum()))  # each edge from both ends
        return 0.5 * self.lam * e, e
