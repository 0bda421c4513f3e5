"""Sheaf-FMTL with restriction maps that relate coordinates, never stored: ``maps = redrawn``,
``features`` and ``aligned`` (the paper's learned maps are :mod:`.sheaf_fmtl`).

Each edge ``e = {i, j}`` couples a support of ``m_e`` paired coordinates (:mod:`sheaf_fmtl.sheaf.
selection`, :mod:`sheaf_fmtl.sheaf.supports`) through ``P_ij = S_(e,t) Pi_i``, ``P_ji = S_(e,t) Pi_j``:

- ``redrawn``: the support is the whole model (``d_i = d_j``); ``S_(e,t)`` is drawn afresh each
  round ``t`` from ``(seed, e, t)`` (``map_kind``: ``selection`` of ``d_e = max(1, floor(gamma d))``
  coordinates, default; ``orthonormal`` or ``gaussian`` rows). Both ends regenerate it, so one
  ``d_e`` vector ``S theta_i`` travels per half-edge and round and nothing is stored.
- ``features``: the weights of the features two tabular clients both see and the biases, all of
  them every round (``S = I``, ``d_e = m_e``; ``gamma`` is not used).
- ``aligned``: the parameter slices two architectures share (nested channels), all of them every
  round; the shared slices start equal (one seeded initial tensor per layer role).

Coupling step (eq. (18) ``thetaupdate`` with these maps; with ``local_epochs = E > 0`` without the
gradient, after ``E`` local passes, as in :mod:`.sheaf_fmtl`):
    ``theta_i <- theta_i - alpha (g_i + lam sum_j P_ij^T (P_ij theta_i - P_ji theta_j))``.
For ``redrawn`` every kind has ``E[S^T S] = (d_e/d) I``, so in expectation the step is dFedU's
with coupling ``lam d_e/d ~ lam gamma``: ``lam = null`` keeps that pull at every ``gamma``
(:mod:`.coupling_strength`), and the start-up check refuses a step that is not mean-square stable,
``alpha lam lambda_S >= 2``, ``lambda_S = 2 (1 - q) + q lambda_max(L)`` (features, aligned: the graph
Laplacian's ``lambda_max``). Edge weights learned from the exchange (``edge_weights =
relatedness``, :mod:`.edge_weights`) scale each edge's terms. The reported energy is the expected one,
``sum_e (d_e/m_e) ||Pi_i theta_i - Pi_j theta_j||^2`` (exact for ``features``/``aligned``).

``estimates = true`` (``redrawn``; CHOCO-SGD, Koloskova, Stich and Jaggi 2019, Algorithm 2): every
edge ``e = {i, j}`` has two public copies, ``xhat_(i|e)`` of ``theta_i`` and ``xhat_(j|e)`` of
``theta_j``, and both ends hold both (``2 x degree x d`` floats per client, zero at the start). The
round's messages refresh them on the round's coordinates, ``xhat_(j|e) += S^+ (S theta_j -
S xhat_(j|e))`` from the message received and ``xhat_(i|e)`` likewise from the message sent (``S^+ =
S^T`` for selection and orthonormal rows), so the two ends hold the same numbers (bit for bit with
selections). The coupling is a consensus step between the copies, zero-sum on every edge:
    ``theta_i <- theta_i - alpha (g_i + lam sum_j a_ij (xhat_(i|e) - xhat_(j|e)))``,
taken once a round (further local steps are plain SGD). The same bits as ``redrawn``. A copy's
coordinate is refreshed with probability ``p = d_e/d`` a round and its residual re-applied every
round until then, so the consensus step is stable only for ``alpha lam lambda_max(L) <= 2p/(2-p)``
(:func:`~.coupling_strength.refresh_limit`), which the start-up check enforces. (Coupling
``theta_i`` to a copy ``x_j`` alone pulls towards the copies' lag, which does not cancel on an edge:
at small ``gamma`` that drags the models towards the past.)

Weighted graphs: each edge's terms are scaled by its ``a_ij`` (``P_ij = sqrt(a_ij) S_(e,t)``, as
dFedU's ``a_ij``), in the coupling, the energy and the start-up check (the weighted graph
Laplacian; the bound over drawn selections is for unweighted graphs only).

Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages): a client skips the terms
of each edge whose message did not arrive, and leaves both of that edge's copies as they were. A
client that sits out is heard by no neighbour and hears none, so the copies still agree; a link lost
in one direction only leaves the two ends' copies different on that round's coordinates until they
are drawn again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import RunConfig
from ...config.registry import MapModeSpec, edge_weights_of
from ...federation import Cohort
from ...messages import EdgeTensor, Payload
from ...sheaf.coordinate_rows import Rows, add_at, gather_at
from ...sheaf.layout import SheafLayout
from ...sheaf.selection import MAP_KINDS, SelectionDraws, dense_maps, position_dtype
from ..protocol.algorithm import Algorithm, Context, register_maps
from ..training.coupling_step import CouplingStep, measured
from ..training.epoch import local_epochs
from ..training.footprint import require_estimates_fit
from ..training.steps import coupled_step, sgd_step
from . import edge_weights as relate
from .coordinate_modes import COUPLED
from .coordinate_stability import check_coordinate_coupling, largest_pull
from .coordinate_state import (
    CoordinateState,
    expected_energy,
    refresh_copies,
)


@dataclass(frozen=True)
class RedrawnKeys(Keys):
    """``maps = redrawn``: the maps' kind, and the neighbours' estimates."""

    map_kind: str = key(
        "selection",
        "`maps=redrawn`: `selection` of `d_ij` random coordinates (O(d_ij) per edge), or `orthonormal` / "
        "`gaussian` rows (O(d_ij d) per edge, drawn each round).",
        choices=MAP_KINDS,
    )
    estimates: bool = key(
        False,
        "`maps=redrawn`: keep a copy of each neighbour's model, refreshed on each round's coordinates, and "
        "couple whole models against it (CHOCO-SGD style; `degree x d` floats per client, same bits).",
    )


@register_maps(
    MapModeSpec(
        "redrawn",
        "maps redrawn each round",
        0.3,
        reads=("gamma", "edge_weights"),
        keys=(RedrawnKeys,),
        pull=0.1,
    ),
    MapModeSpec("features", "feature maps", 0.1, reads=("edge_weights",), pull=0.1),
    MapModeSpec("aligned", "aligned maps", 0.3, reads=("edge_weights",), pull=0.3),
)
class CoordinateSheaf(Algorithm[CoordinateState]):
    """``algorithm = sheaf-fmtl`` with ``maps`` a key of :data:`COUPLED` (see the module docstring)."""

    name = "sheaf-fmtl"

    def __init__(self, config: RunConfig) -> None:
        self.mode, self.kind = config.maps, config.map_kind
        self.lam, self.alpha, self.seed = config.lam_value, config.alpha, config.seed
        self.local_steps = config.local_steps
        self.use_estimates = config.estimates
        self.notes: list[str] = []
        self.models: list[Cohort] | None = None  # whose losses the relatedness probes (None: the clients')
        learned = edge_weights_of(config) == "relatedness" and self.lam > 0
        self.relate = relate.Relatedness() if learned else None  # edge weights (edge_weights.py)
        self.coupling = CouplingStep(config, self.lam)  # the step after the local epochs (coupling_step.py)

    # -- start-up ---------------------------------------------------------------------------------
    def init(self, ctx: Context) -> CoordinateState:
        cfg, graph = ctx.config, ctx.graph
        state = COUPLED[self.mode](ctx, ctx.init_thetas())
        layout, thetas = state.layout, state.thetas
        assert layout is not None
        if self.use_estimates:  # both copies of an edge start equal (zero) at both ends
            require_estimates_fit(layout, thetas[0].element_size(), cfg.device)
            state.estimates = [thetas[b.cohort].new_zeros(b.size, b.node_dim) for b in layout.buckets]
            state.own_copies = [e.clone() for e in state.estimates]
        if graph.weighted:  # a_ij per half-edge of each bucket
            a, buckets = graph.half_edge_weights(), layout.buckets
            dtype, dev = thetas[0].dtype, thetas[0].device
            state.weights = [torch.as_tensor(a[h.half_edges], dtype=dtype, device=dev) for h in buckets]
        if self.relate is not None and self.mode == "redrawn" and self.kind != "selection":
            self.relate = None
            self.notes.append(
                f"edge_weights=relatedness reads coordinates, which map_kind={self.kind} does not select; "
                "the run uses the graph's weights"
            )
        if self.relate is not None:
            self.relate.start(state)
        if ctx.config.stability_check and self.lam > 0 and not measured(cfg):  # (measured: capped each round)
            note = check_coordinate_coupling(state, ctx, self.kind, self.use_estimates)
            if note:
                self.notes.append(note)
        self.coupling.start(ctx, lambda: largest_pull(state, ctx, self.kind, self.use_estimates))
        return state

    # -- this round's maps -------------------------------------------------------------------------
    def _maps(self, state: CoordinateState) -> tuple[Sequence[Rows], list[torch.Tensor] | None]:
        """Per bucket: flat coordinates ``[H_b, d_e]`` (selections) or the whole rows' positions with
        dense ``S [H_b, d_e, d]``; drawn once per round from ``(seed, edge, round)``."""
        if state.constant_coords is not None:
            return state.constant_coords, None
        if state.maps_now is not None:
            return state.maps_now
        layout = state.layout
        assert layout is not None
        dev = state.thetas[0].device
        if self.kind == "selection":
            if state.draws is None:  # the round-independent part of the draws, once per run
                m = layout.node_dims[layout.graph.src[layout.order]]
                state.draws = SelectionDraws(self.seed, layout.order // 2, m, layout.messages.sizes, dev)
            small = all(t.numel() < 2**31 for t in state.thetas)  # int32 positions: half the bytes
            dtype = torch.int32 if small else torch.long
            # each edge once, positions within a model (narrowest dtype); rows built when read
            blocks = state.draws.blocks(state.round, position_dtype(int(layout.node_dims.max(initial=1))))
            rows = [
                state.draws.rows(b.first, b.first + b.size, blocks, b.src_pos_on(dev).to(dtype) * t.shape[1])
                for b, t in ((b, state.thetas[b.cohort]) for b in layout.buckets)
            ]
            state.maps_now = (rows, None)
        else:
            dense = [
                dense_maps(
                    self.kind, self.seed, b.half_edges // 2, state.round, b.edge_dim, b.node_dim, dev
                ).to(state.thetas[b.cohort].dtype)
                for b in layout.buckets
            ]
            state.maps_now = ([], dense)
        return state.maps_now

    def _messages(self, state: CoordinateState) -> list[torch.Tensor]:
        """``P_ij theta_i`` per bucket ``[H_b, d_e]``."""
        assert state.layout is not None
        coords, dense = self._maps(state)
        if dense is None:
            return [
                gather_at(state.thetas[b.cohort].reshape(-1), c, b.edge_dim)
                for b, c in zip(state.layout.buckets, coords, strict=True)
            ]
        return [
            torch.bmm(s, b.sources(state.thetas).unsqueeze(-1)).squeeze(-1)
            for b, s in zip(state.layout.buckets, dense, strict=True)
        ]

    def _spread(self, state: CoordinateState, per_bucket: list[torch.Tensor]) -> list[torch.Tensor]:
        """``sum_j P_ij^T v_ij`` per cohort ``[C, d]`` from per-bucket ``v [H_b, d_e]``."""
        assert state.layout is not None
        coords, dense = self._maps(state)
        out = [torch.zeros_like(t) for t in state.thetas]
        for k, (b, v) in enumerate(zip(state.layout.buckets, per_bucket, strict=True)):
            target = out[b.cohort]
            if dense is None:
                add_at(target.view(-1), coords[k], v)
            else:
                back = torch.bmm(dense[k].transpose(1, 2), v.unsqueeze(-1)).squeeze(-1)
                target.index_add_(0, b.src_pos_on(target.device), back)
        return out

    # -- rounds ------------------------------------------------------------------------------------
    def local(self, state: CoordinateState, ctx: Context) -> CoordinateState:
        if ctx.epoch_mode:  # E passes of plain SGD on f_i; the coupling follows the exchange
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            state.grads = None
        else:
            state.grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
        return state

    def send(self, state: CoordinateState, phase: int, ctx: Context) -> Payload:
        assert state.layout is not None
        state.own = self._messages(state)
        own = [m.reshape(-1) for m in state.own] or [state.thetas[0].new_zeros(0)]
        flat = own[0] if len(own) == 1 else torch.cat(own)  # one bucket: its messages, no copy
        payload: Payload = {"msg": EdgeTensor(flat, state.layout.messages)}
        if self.relate is not None and state.round % relate.EVERY == 0:  # this end's averages (N, R)
            payload["relatedness"] = self.relate.payload(state)
        return payload

    def receive(self, state: CoordinateState, incoming: Payload, phase: int, ctx: Context) -> CoordinateState:
        layout, own = state.layout, state.own
        assert layout is not None and own is not None
        msg = incoming["msg"]
        assert isinstance(msg, EdgeTensor)
        theirs = list(layout.bucket_messages(msg.data))
        held = None if msg.heard is None else self._per_bucket(layout, msg.heard)  # [H_b] bool
        if state.estimates is not None:
            refresh_copies(state, self._maps(state), own, theirs, held, self.kind)
        weights = state.weights
        if self.relate is not None:
            models = self.models if self.models is not None else ctx.fed.cohorts
            weights = self.relate.weights(state, models, self._maps(state)[0], incoming, theirs, held)
        grads = state.grads
        for step in range(1 if grads is None else self.local_steps):
            if step > 0:  # further local steps: fresh gradients, own messages from the current theta
                grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
                if state.estimates is not None:  # the copies' consensus step is taken once a round
                    state.thetas = sgd_step(state.thetas, grads, self.alpha)
                    continue
                own = self._messages(state)
            last = grads is None or step == self.local_steps - 1  # the messages heard are used up
            pull = self._pull(state, own, theirs, held, weights, used_up=last)
            own_step = self.coupling.steps(state, state.thetas) if grads is None else None
            state.thetas = coupled_step(state.thetas, grads, pull, self.alpha, self.lam, own_step)
        state.own = state.grads = None
        state.round += 1
        state.maps_now = None  # the next round draws new maps (redrawn)
        return state

    @staticmethod
    def _per_bucket(layout: SheafLayout, per_half_edge: torch.Tensor) -> list[torch.Tensor]:
        return [per_half_edge[b.first : b.first + b.size] for b in layout.buckets]

    def _pull(
        self,
        state: CoordinateState,
        own: list[torch.Tensor],
        theirs: list[torch.Tensor],
        held: list[torch.Tensor] | None,
        weights: list[torch.Tensor] | None,
        used_up: bool = False,
    ) -> list[torch.Tensor]:
        """The coupling term per cohort: ``sum_j a_ij S^T (S theta_i - S theta_j)``, or with
        estimates ``sum_j a_ij (xhat_(i|e) - xhat_(j|e))``, over the neighbours heard (``held``
        ``[H_b]`` per bucket; ``a_ij``: ``weights`` per bucket, the graph's and the learned ones;
        ``None``: 1). One residual per bucket, written over ``own`` (a further local step sends
        afresh), scaled and masked in place; ``used_up`` (no further step reads ``theirs``): written
        over ``theirs`` instead and ``own`` emptied, so the messages sent are freed before the spread."""
        assert state.layout is not None
        if state.estimates is None:
            if used_up:
                r = [torch.sub(o, t, out=t) for o, t in zip(own, theirs, strict=True)]
                own.clear()  # (the list state.own holds: the sent messages go now)
            else:
                r = [o.sub_(t) for o, t in zip(own, theirs, strict=True)]
            for k, x in enumerate(r):
                if weights is not None:
                    x.mul_(weights[k][:, None])
                if held is not None:
                    x.masked_fill_(~held[k][:, None], 0.0)
            return self._spread(state, r)
        out = [torch.zeros_like(t) for t in state.thetas]
        assert state.own_copies is not None
        pairs = zip(state.layout.buckets, state.own_copies, state.estimates, strict=True)
        for k, (b, mine, est) in enumerate(pairs):
            diff = mine - est
            if weights is not None:
                diff = diff * weights[k][:, None]
            if held is not None:
                diff = torch.where(held[k][:, None], diff, diff.new_zeros(()))
            out[b.cohort].index_add_(0, b.src_pos_on(diff.device), diff)
        return out

    # -- reporting ---------------------------------------------------------------------------------
    def penalty(self, state: CoordinateState, ctx: Context) -> tuple[float, float]:
        e = expected_energy(state, ctx.comm)
        return 0.5 * self.lam * e, e

    def diagnose(self, state: CoordinateState, ctx: Context) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def checkpoint(self, state: CoordinateState, ctx: Context) -> dict[str, Any]:
        """Per graph half-edge ``[2E]`` (zero on those held elsewhere): ``shared_parameters``, the
        support size ``m_e``, and ``map_norms``, ``||P_ij||_F = sqrt(a_ij d_e)`` (selections,
        orthonormal rows; the expected norm for gaussian rows; ``a_ij`` with the learned weights).
        With ``edge_weights = relatedness``: ``edge_weights`` ``[2E]`` (the last round's ``a_e``),
        ``edge_weight_history`` ``[K, E]`` per graph edge at the exchange rounds ``edge_weight_rounds``."""
        layout = state.layout
        assert layout is not None and state.support is not None
        h, order = layout.graph.num_half_edges, torch.as_tensor(layout.order)
        shared = torch.zeros(h, dtype=torch.float64)
        norms = torch.zeros(h, dtype=torch.float64)
        shared[order] = torch.as_tensor(state.support.m, dtype=torch.float64)
        a = layout.graph.half_edge_weights()[layout.order]
        out = {"shared_parameters": shared, "map_norms": norms}
        if self.relate is not None:  # the learned weights: the last round's, and over rounds
            learned = self.relate.saved(state, layout)
            a = a * learned["edge_weights"][order].numpy()
            out.update(learned)
        norms[order] = torch.as_tensor(np.sqrt(a * layout.messages.sizes), dtype=torch.float64)
        return out
