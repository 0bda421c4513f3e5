"""Sheaf-FMTL, the paper's Algorithm 1 (synchronous; every client uses round-k messages).

Theta step (eq. (18) ``thetaupdate``):
    ``theta_i <- theta_i - alpha (g_i + lam sum_j P_ij^T (P_ij theta_i - P_ji theta_j))``
Map step with the new thetas (eq. (19) ``pijaupdate``):
    ``P_ij <- P_ij - eta lam r_ij theta_i^T``,  ``r_ij = P_ij theta_i - P_ji theta_j``.

Message modes (same iterates):
- ``literal``: every round sends ``P_ij theta_i`` (for the theta step) and ``P_ij theta_i^new``
  (for the map step): two ``d_ij`` vectors per neighbour.
- ``compact``: after the map step ``P_ij' theta_i = P_ij theta_i - eta lam r_ij ||theta_i||^2``, so
  the next round's first message is rebuilt by the receiver from the second one plus the scalar
  ``||theta_i||^2``: one ``d_ij`` vector and one scalar per neighbour and round (after a first
  round that sends both).
The rank-one map steps are deferred and folded into the stacked maps every few rounds
(:mod:`sheaf_fmtl.sheaf.deferred`, ``map_defer``), so a round reads the maps twice and rarely writes
them. ``eta = 0`` keeps the maps fixed (the special cases) and needs one message per round.

Local epochs (``local_epochs = E > 0``, the training protocol of the authors' released code and of
the baselines' reference codes): a round is ``E`` passes of mini-batch SGD on each client's own
``f_i``, ``theta_i <- theta_i - alpha g_i``, then one exchange of ``P_ij theta_i`` (and, compact,
``||theta_i||^2``), the map step (eq. (19) ``pijaupdate``) at these thetas, and the coupling step of eq.
(18) ``thetaupdate`` without the gradient, with the updated maps:
    ``theta_i <- theta_i - alpha lam sum_j P_ij'^T (P_ij' theta_i - P_ji' theta_j)``.
The authors' code takes the coupling step before the map step, which needs a second message per
round; taking the map step first, the messages with the updated maps follow from the identity
above, so a round sends one ``d_ij`` vector and one scalar per neighbour (``literal``: two vectors).

Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages; ``EdgeTensor.heard``):
a client skips the terms of an edge whose message did not arrive, for the updates that use that
message: the coupling term ``P_ij^T r_ij`` of the theta step and the map step of ``P_ij`` (both
use ``r_ij = 0``). In compact mode one message serves the map step of round ``k`` and the theta step
of round ``k + 1``, so losing it skips both. A client that sits a round out sends nothing, receives
nothing and keeps its theta (the runtime puts it back) and its maps (no message arrived, so every
``r_ij`` of its edges is zero).

Start-up: ``alpha lam lambda_max(L_F) >= 2`` (power iteration, :mod:`sheaf_fmtl.sheaf.stability`)
makes the coupling step diverge and is refused; Theorem 1's map-step condition ``eta < 2 / (lam D^2)``
(``D``: the largest ``||theta_i||`` seen) is checked at every evaluation, and in compact mode every
round on the device, and a warning is given once (also in a divergence message).

Weighted graphs (edge weights ``a_ij``, a three-column ``graph_file``): each edge's terms are scaled by
``a_ij``, the maps acting as ``sqrt(a_ij) P_ij`` (the paper's dFedU special case ``P_ij = sqrt(a_ij)
I``): the coupling ``sum_j a_ij P_ij^T r_ij``, the map step ``P_ij <- P_ij - eta lam a_ij r_ij
theta_i^T`` (the gradient of ``lam/2 a_ij ||r_ij||^2``), the energy ``sum_e a_e ||r_e||^2``, the
start-up check (the weighted ``L_F``) and the reported map norms ``sqrt(a_ij) ||P_ij||_F``. The
messages stay ``P_ij theta_i``: both ends know ``a_ij``.

The state and its checkpoint are in :mod:`.sheaf_state`; the per-half-edge message helpers (norms,
arrival flags, residuals) in :mod:`.sheaf_messages`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import ConfigError, RunConfig
from ...config.defaults import LAM_DEFAULT
from ...config.errors import fix
from ...config.registry import MapModeSpec
from ...messages import Comm, EdgeTensor, Payload
from ...sheaf import ops
from ...sheaf.layout import build_layout
from ...sheaf.maps import MAP_DTYPES, MAP_INITS, init_maps
from ...sheaf.stability import laplacian_lambda_max
from ..protocol.algorithm import Algorithm, Context, register, register_maps
from ..training.coupling import require_stable_coupling
from ..training.epoch import local_epochs
from ..training.footprint import require_maps_fit
from .learned_state import SheafState
from .messages import masked_residual, spread_heard, sq_norms

# Power iterations of the start-up check: fewer for large map stacks on the CPU (each reads all maps
# twice: about 2.3 s at R-MNIST scale on 2 cores, 6 ms on an H200).
STABILITY_ITERS, STABILITY_ITERS_LARGE, LARGE_MAPS_BYTES = 30, 4, 1 << 30


#: The keys of the modes that store drawn maps; ``learned`` also reads the maps' step.
_STORED_MAPS = ("save_maps", "gamma")


@dataclass(frozen=True)
class StoredMapKeys(Keys):
    """The stored restriction maps of ``maps = learned`` and ``fixed``: their initial draw and storage."""

    map_init: str = key(
        "gaussian",
        "Initial maps (zero maps never learn, and are refused: the paper's Remark).",
        choices=MAP_INITS,
    )
    map_scale: float | None = key(
        None,
        "Scale of the initial maps (sigma; `a` for uniform); `null`: `1/sqrt(d_i)` (uniform: "
        "`sqrt(3/d_i)`), so `P^T P` is close to a projection whatever the model size. The paper's "
        "N(0, 1) is `map_scale=1`, which needs `alpha lam` about `d_i` times smaller.",
        rule="map_scale >= 0",
    )
    map_dtype: str = key(
        "float32", "Storage of the maps (`bfloat16`: half the memory).", choices=tuple(MAP_DTYPES)
    )
    shared_maps: bool = key(
        True,
        "Both maps of an edge between equal-size models start equal (`P_ji = P_ij`), so the coupling "
        "asks the two models to agree on one projection; `false`: independent draws (the paper's wording).",
    )
    map_draw: str = key(
        "host",
        "`host`: each map drawn on the CPU from the seed (the same maps on every device); `device`: drawn "
        "per bucket on the device (same law, other numbers; seconds instead of minutes for GiBs of maps).",
        choices=("host", "device"),
    )

    def check(self, config: RunConfig) -> None:
        """Zero maps never learn (the paper's Remark): refused for the draws ``map_scale`` scales."""
        if config.map_init in ("gaussian", "uniform", "orthogonal") and config.map_scale == 0.0:
            raise ConfigError(
                f"config key 'map_scale' = 0 gives zero maps with map_init={config.map_init}; "
                "zero restriction maps never learn (allowed: map_scale > 0)"
                + fix("map_scale", config.default_of("map_scale"))
            )


@dataclass(frozen=True)
class LearnedMessageKeys(Keys):
    """How ``maps = learned`` sends its messages and folds its map updates (same iterates either way)."""

    message_mode: str = key(
        "compact",
        "`compact`: one `d_ij` vector and one scalar per neighbour and round; `literal`: two vectors "
        "(Algorithm 1 as written). Same iterates.",
        choices=("compact", "literal"),
    )
    map_defer: int = key(
        -1,
        "Fold the rank-one map updates into the maps every so many rounds (-1: about `sqrt(d_ij)`; "
        "1: every round). Same iterates.",
        rule="map_defer >= -1 (-1 = auto)",
    )


@register(
    "sheaf-fmtl",
    display="Sheaf-FMTL",
    step_keys=("alpha", "eta", "lam", "map_scale"),
    reads=("lam",),
    color=0,
    divergence_hint=": Theorem 1 asks alpha < 2/(N L) and eta < 2/(lambda D^2)",
)
@register_maps(
    MapModeSpec(
        "learned",
        "the paper's learned maps",
        LAM_DEFAULT,
        reads=("eta", *_STORED_MAPS),
        keys=(LearnedMessageKeys, StoredMapKeys),
        builds_maps=False,
        idle_as="fixed",
        unrecorded=True,
    ),
    MapModeSpec(
        "fixed", "fixed maps", LAM_DEFAULT, reads=_STORED_MAPS, builds_maps=False, keys=(StoredMapKeys,)
    ),
)
class SheafFMTL(Algorithm[SheafState]):
    name = "sheaf-fmtl"

    def __init__(self, config: RunConfig) -> None:
        self.lam = config.lam_value
        self.alpha = config.alpha
        self.eta = config.eta
        self.local_steps = config.local_steps
        self.compact = config.message_mode == "compact"
        self.learn_maps = config.learns_maps  # maps=fixed: eta = 0
        self.epochs = config.local_epochs > 0
        self.notes: list[str] = []  # warnings for the user, drained by the runtime

    def init(self, ctx: Context) -> SheafState:
        cfg = ctx.config
        layout = build_layout(ctx.graph, ctx.fed.node_dims().tolist(), ctx.fed.cohort_of.tolist(), cfg.gamma)
        require_maps_fit(layout, cfg)
        maps = init_maps(
            layout,
            cfg.map_init,
            cfg.map_scale,
            dtype=MAP_DTYPES[cfg.map_dtype],
            generator=ctx.init_gen,
            device=cfg.device,
            shared=cfg.shared_maps,
            on_device=cfg.map_draw == "device",
        )
        scalars = layout.messages.with_sizes(np.ones(len(layout.order), np.int64))
        sizes = torch.as_tensor(layout.messages.sizes, device=cfg.device)
        element_edge = torch.repeat_interleave(torch.arange(len(sizes), device=cfg.device), sizes)
        state = SheafState(
            thetas=ctx.init_thetas(),
            layout=layout,
            scalars=scalars,
            map_defer=cfg.map_defer,
            element_edge=element_edge,
        )
        if ctx.graph.weighted:  # a_ij per message element, through its half-edge
            a = torch.as_tensor(ctx.graph.half_edge_weights()[layout.order], device=cfg.device)
            state.weights = a.to(state.thetas[0].dtype).index_select(0, element_edge)
        state.maps = maps
        self.check_stability(state, cfg, ctx.comm)
        return state

    def check_stability(self, state: SheafState, cfg: RunConfig, comm: Comm | None = None) -> None:
        """The start-up check on the current maps (also after maps are replaced by hand, see
        :func:`sheaf_fmtl.scenarios.set_fixed_maps`): ``lambda_max(L_F)`` by power
        iteration, ``alpha lam lambda_max >= 2`` refused, ``>= 1`` noted."""
        if not cfg.stability_check or self.lam <= 0:
            return
        assert state.layout is not None and state.store is not None
        big = state.layout.map_bytes(MAP_DTYPES[cfg.map_dtype].itemsize) > LARGE_MAPS_BYTES
        iters = STABILITY_ITERS_LARGE if big and cfg.device == "cpu" else STABILITY_ITERS
        state.lambda_max = laplacian_lambda_max(
            state.layout, state.thetas, state.store, iters, cfg.seed, comm, weights=state.weights
        )
        note = require_stable_coupling(self.alpha, self.lam, state.lambda_max, "sheaf Laplacian L_F")
        if note:
            self.notes.append(note)

    # -- rounds ---------------------------------------------------------------------------------
    def local(self, state: SheafState, ctx: Context) -> SheafState:
        if self.epochs:  # E passes of SGD (or `optimizer`) on f_i; the coupling follows the exchange
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            return state
        state.grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
        state.opens_with_messages = state.theirs is None
        if not state.opens_with_messages:  # this round's messages are already known (compact mode)
            self._theta_steps(state, ctx)
        return state

    def phases(self, state: SheafState) -> int:
        if self.epochs:  # messages at the trained thetas; literal mode resends after the map step
            return 1 + int(self.learn_maps and not self.compact)
        return int(state.opens_with_messages) + int(self.learn_maps)

    def send(self, state: SheafState, phase: int, ctx: Context) -> Payload:
        assert state.layout is not None and state.store is not None and state.scalars is not None
        state.sent = ops.messages(state.layout, state.thetas, state.store)
        payload: Payload = {"msg": EdgeTensor(state.sent, state.layout.messages)}
        if self._is_map_phase(state, phase) and self.compact:
            state.sent_sq = sq_norms(state.layout, state.thetas)
            self._track_norms(state)
            payload["sq_norm"] = EdgeTensor(state.sent_sq, state.scalars)
        return payload

    def _track_norms(self, state: SheafState) -> None:
        """Theorem 1's ``D`` between evaluations, on the device (no sync): the first round where a
        sent ``||theta_i||^2`` makes ``eta lam ||theta_i||^2 >= 2``, and that norm."""
        assert state.sent_sq is not None
        state.rounds_sent += 1
        top = state.sent_sq.max()
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        if state.first_violation is None:
            state.first_violation = torch.full((2,), -1.0, dtype=top.dtype, device=top.device)
        fresh = (self.eta * self.lam * top >= 2.0) & (state.first_violation[0] < 0)
        now = torch.stack([torch.full_like(top, state.rounds_sent), top])
        state.first_violation = torch.where(fresh, now, state.first_violation)

    def receive(self, state: SheafState, incoming: Payload, phase: int, ctx: Context) -> SheafState:
        if self.epochs:
            if self._is_map_phase(state, phase):
                self._map_step(state, incoming)  # compact: also the messages with the new maps
                if self.compact:
                    self._coupling_step(state)
            else:
                self._take_messages(state, incoming)
                self._coupling_step(state)
            return state
        if self._is_map_phase(state, phase):
            self._map_step(state, incoming)
        else:  # greeting: the messages for the theta step of this round
            self._take_messages(state, incoming)
            self._theta_steps(state, ctx)
        return state

    def _take_messages(self, state: SheafState, incoming: Payload) -> None:
        """This round's ``P_ij theta_i`` (sent) and ``P_ji theta_j`` (received), and which arrived."""
        state.own, state.theirs = state.sent, incoming["msg"].data
        state.heard = spread_heard(incoming["msg"])

    def _is_map_phase(self, state: SheafState, phase: int) -> bool:
        return self.learn_maps and phase == (0 if self.epochs else int(state.opens_with_messages))

    # -- the two updates --------------------------------------------------------------------------
    def _theta_steps(self, state: SheafState, ctx: Context) -> None:
        """Eq. (18) (``thetaupdate``), ``local_steps`` times with the same received ``P_ji theta_j``."""
        assert state.layout is not None and state.store is not None and state.grads is not None
        assert state.own is not None and state.theirs is not None
        layout, maps, grads = state.layout, state.store, state.grads
        for step in range(self.local_steps):
            if step > 0:  # further local steps: fresh gradients, own messages from the current theta
                grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
                state.own = ops.messages(layout, state.thetas, maps)
            residual = masked_residual(state.own, state.theirs, state.heard, state.weights)
            coupling = ops.transpose_sum(layout, maps, residual, state.thetas)
            state.thetas = [
                t - self.alpha * (g + self.lam * c)
                for t, g, c in zip(state.thetas, grads, coupling, strict=True)
            ]
        state.theirs = state.own = state.heard = None  # used up: this round's messages

    def _coupling_step(self, state: SheafState) -> None:
        """Eq. (18) (``thetaupdate``) without the gradient (local-epochs mode): ``theta_i <- theta_i -
        alpha lam sum_j a_ij P_ij^T (own_ij - theirs_ij)``."""
        assert state.layout is not None and state.store is not None
        assert state.own is not None and state.theirs is not None
        residual = masked_residual(state.own, state.theirs, state.heard, state.weights)
        coupling = ops.transpose_sum(state.layout, state.store, residual, state.thetas)
        state.thetas = [t - (self.alpha * self.lam) * c for t, c in zip(state.thetas, coupling, strict=True)]
        state.theirs = state.own = state.heard = None

    def _map_step(self, state: SheafState, incoming: Payload) -> None:
        """Eq. (19) (``pijaupdate``) with the new thetas; in compact mode also rebuild the next round's
        messages: ``P_ij' theta_i = P_ij theta_i - eta lam a_ij r_ij ||theta_i||^2`` on both ends."""
        assert state.layout is not None and state.store is not None and state.sent is not None
        layout = state.layout
        scale = -self.eta * self.lam
        mine, theirs = state.sent, incoming["msg"].data
        heard = spread_heard(incoming["msg"])
        residual = masked_residual(mine, theirs, heard, state.weights)  # zero: that map step is skipped
        for k, (b, r) in enumerate(zip(layout.buckets, layout.bucket_messages(residual), strict=True)):
            state.store.add_rank_one(k, r, b.sources(state.thetas), scale)
        if self.compact:
            assert state.element_edge is not None and state.sent_sq is not None
            spread = state.element_edge  # one value per half-edge, spread over its d_ij elements
            own_sq = state.sent_sq.index_select(0, spread)
            their_sq = incoming["sq_norm"].data.index_select(0, spread)
            state.own = torch.addcmul(mine, residual, own_sq, value=scale)
            state.theirs = torch.addcmul(theirs, residual, their_sq, value=-scale)
            state.heard = heard  # the next theta step uses these messages

    # -- reporting --------------------------------------------------------------------------------
    def penalty(self, state: SheafState, ctx: Context) -> tuple[float, float]:
        assert state.layout is not None and state.store is not None
        sent = ops.messages(state.layout, state.thetas, state.store)  # r_ij via an uncounted exchange
        theirs = ctx.comm.peek({"msg": EdgeTensor(sent, state.layout.messages)})["msg"].data
        r = sent - theirs
        if state.weights is not None:  # sum_e a_e ||r_e||^2
            r = r * state.weights.sqrt()
        e = float(ctx.comm.all_sum(ops.energy_from_residuals(r)))
        return 0.5 * self.lam * e, e

    def diagnose(self, state: SheafState, ctx: Context) -> list[str]:
        """At an evaluation: Theorem 1's map-step condition ``eta < 2 / (lam D^2)``, ``D`` the largest
        ``||theta_i||`` seen so far; a warning the first time it fails."""
        notes, self.notes = self.notes, []
        if not self.learn_maps:
            return notes
        local = torch.stack([torch.linalg.vector_norm(t, dim=1).max() for t in state.thetas])
        norms = [float(ctx.comm.all_max(local.max()))]  # over every process's clients
        when = None
        if state.first_violation is not None:  # every round's sent norms (compact mode)
            first_round, first_sq = state.first_violation.tolist()
            if first_round >= 0:
                when, norms = int(first_round), [first_sq**0.5]
        state.theta_norm_max = max([state.theta_norm_max, *(n for n in norms if math.isfinite(n))])
        bound = 2.0 / (self.lam * state.theta_norm_max**2) if state.theta_norm_max > 0 else float("inf")
        if self.eta >= bound and not state.warned_map_step:
            state.warned_map_step = True
            since = f" since round {when}" if when is not None else ""
            notes.append(
                f"eta = {self.eta:g} is above Theorem 1's map-step bound 2/(lam D^2) = {bound:.3g}{since} "
                f"(D = {state.theta_norm_max:.3g}, the largest ||theta_i|| then): the map step may "
                "not converge; lower eta"
            )
        return notes

    def checkpoint(self, state: SheafState, ctx: Context) -> dict[str, Any]:
        assert state.layout is not None and state.store is not None
        layout, maps = state.layout, state.maps
        out: dict[str, Any] = {
            "bucket_half_edges": [torch.as_tensor(b.half_edges) for b in layout.buckets],
            "map_norms": ops.map_frobenius(layout, maps),
        }
        if ctx.graph.weighted:  # the maps act as sqrt(a_ij) P_ij
            a = torch.as_tensor(ctx.graph.half_edge_weights(), dtype=torch.float64)
            out["map_norms"] = out["map_norms"] * a.sqrt()
        if ctx.config.save_maps:  # off: the norms only (a paper-scale map stack is ~12 GB)
            out["maps"] = [m.cpu() for m in maps]
        return out
