"""The state of :mod:`.sheaf_coordinates` (maps that relate coordinates), the supports of its
structure-aware modes per half-edge, and its FLOP count."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...config import ConfigError, RunConfig
from ...federation import Cohorts
from ...messages import Comm, EdgeLayout, EdgeTensor
from ...sheaf.coordinate_rows import Rows
from ...sheaf.layout import SheafLayout
from ...sheaf.selection import SelectionDraws, Support
from ...sheaf.supports import aligned_support, feature_support
from ..protocol.algorithm import Context, PerSampleFlops, State


@dataclass
class CoordinateState(State):
    """Thetas, the layout (buckets of half-edges by source cohort and ``d_e``), the supports, the
    round counter the maps are drawn from, and (``estimates``) both public copies of every edge."""

    layout: SheafLayout | None = None
    support: Support | None = None
    round: int = 0
    grads: list[torch.Tensor] | None = None
    own: list[torch.Tensor] | None = None  # per bucket [H_b, d_e]: P_ij theta_i sent this round
    estimates: list[torch.Tensor] | None = None  # per bucket [H_b, d]: xhat_(j|e) held at half-edge i -> j
    own_copies: list[torch.Tensor] | None = None  # per bucket [H_b, d]: xhat_(i|e), the copy j holds of i
    lambda_max: float | None = None  # start-up bound on lambda_max of every round's sheaf Laplacian
    # features/aligned: per bucket [H_b, d_e], the flat coordinates coupled, the same every round
    constant_coords: list[torch.Tensor] | None = field(default=None, repr=False)
    weights: list[torch.Tensor] | None = field(default=None, repr=False)  # per bucket [H_b] a_ij, weighted
    maps_now: tuple[Sequence[Rows], list[torch.Tensor] | None] | None = field(default=None, repr=False)
    draws: SelectionDraws | None = field(default=None, repr=False)  # maps=redrawn, map_kind=selection
    # edge_weights = relatedness (algorithms/maps/edge_weights.py): per bucket [H_b, 2] the averaged signals
    # (n, r) of each half-edge, per bucket [H_b] this round's weights a_e, and the weights over rounds
    relatedness: list[torch.Tensor] | None = None
    learned_weights: list[torch.Tensor] | None = None
    weight_trace: list[torch.Tensor] = field(default_factory=list)  # [H] a_e of each exchange round
    initial: list[torch.Tensor] | None = field(default=None, repr=False)  # per cohort the initial thetas

    def checkpoint(self) -> dict[str, Any]:
        """The data fields but ``constant_coords``, ``weights`` and ``initial``, which ``init`` rebuilds
        (the supports' coordinates are as large as the shared parameters with ``maps=aligned``)."""
        rebuilt = ("constant_coords", "weights", "initial")
        return {k: v for k, v in super().checkpoint().items() if k not in rebuilt}

    @property
    def coupling_state_bytes(self) -> int:
        """Bytes of what the coupling keeps between rounds: both copies of every edge (no maps are
        stored)."""
        kept = (self.estimates or []) + (self.own_copies or [])
        return sum(e.numel() * e.element_size() for e in kept)

    def flop_terms(
        self, config: RunConfig, fed: Cohorts, samples: list[int], rounds: int, per_sample: PerSampleFlops
    ) -> tuple[int | None, int | None]:
        """The coupling's count, :func:`coupling_flops`; local training's is the default."""
        return None, coupling_flops(config, self, rounds)


def flat_index(
    layout: SheafLayout, thetas: list[torch.Tensor], coords: list[torch.Tensor], in_place: bool = False
) -> list[torch.Tensor]:
    """Per bucket ``[H_b, d_e]``: positions in ``thetas[c].view(-1)`` of each half-edge's source
    coordinates ``coords[b]`` (of ``coords``' dtype; ``in_place``: written over ``coords``)."""
    out = []
    for b, c in zip(layout.buckets, coords, strict=True):
        t = thetas[b.cohort]
        row = (b.src_pos_on(t.device) * t.shape[1]).to(c.dtype)[:, None]
        out.append(c.add_(row) if in_place else c + row)
    return out


def _tabular(ctx: Context) -> list[bool]:
    return [c.model_name in ("linear", "logistic") for c in ctx.fed.cohorts]


def aligned_supports(ctx: Context) -> list[np.ndarray]:
    """Per graph half-edge ``i -> j``: the coordinates of ``theta_i`` it couples (``maps =
    aligned``: the parameter slices two architectures share)."""
    fed, graph = ctx.fed, ctx.graph
    if any(_tabular(ctx)):
        raise ConfigError(
            "maps=aligned matches layers of neural networks; for linear/logistic models use maps=features"
        )
    modules = [fed.architecture(i).module for i in range(fed.num_clients)]  # held here or not
    out: list[np.ndarray] = [np.zeros(0, np.int64)] * graph.num_half_edges
    for e, (i, j) in enumerate(graph.edges.tolist()):
        out[2 * e], out[2 * e + 1] = aligned_support(modules[i], modules[j])
    return out


def feature_supports(ctx: Context) -> list[np.ndarray]:
    """Per graph half-edge ``i -> j``: the coordinates of ``theta_i`` it couples (``maps =
    features``: the weights of the features both clients see, and the biases)."""
    fed, graph = ctx.fed, ctx.graph
    tabular = _tabular(ctx)
    features = fed.dataset.features
    if features is None:
        raise ConfigError(
            f"maps=features needs the ids of each client's feature columns; dataset {fed.dataset.name} "
            "has none (built-in generators carry them; file: data gives features_i per client)"
        )
    if not all(tabular):
        raise ConfigError(
            "maps=features couples the weights of linear/logistic models; use maps=aligned for networks"
        )
    outputs = fed.dataset.num_classes if fed.task == "classification" else 1
    dims = fed.node_dims()
    for i, f in enumerate(features):
        if dims[i] != outputs * (len(f) + 1):
            raise ConfigError(f"maps=features: client {i} has {dims[i]} parameters but {len(f)} feature ids")
    return [
        feature_support(features[i], features[j], outputs) for i, j in zip(graph.src, graph.dst, strict=True)
    ]


def coupling_flops(config: RunConfig, state: CoordinateState, rounds: int) -> int:
    """Floating-point operations of the coupling over ``rounds`` rounds: selections cost the
    residuals and their scatter (``2 sum d_e`` per step); dense kinds ``2 d_e d`` per product
    (message and coupling per step; with estimates the message per step and two products for each
    of the edge's two copies), QR ``2 d d_e^2`` per half-edge; estimates ``2 d`` per half-edge and
    step (the difference of the copies and its scatter)."""
    layout = state.layout
    assert layout is not None
    steps = 1 if config.local_epochs > 0 else config.local_steps
    elements = int(layout.messages.total)
    per_round = 0
    weighted = 3 if state.weights is not None else 2  # a_ij: one more product per element
    if state.estimates is None:
        per_round += weighted * elements * steps
    else:
        per_round += sum(weighted * b.size * b.node_dim for b in layout.buckets) * steps
    if state.constant_coords is None and config.map_kind != "selection":  # redrawn dense rows
        products = sum(2 * b.size * b.edge_dim * b.node_dim for b in layout.buckets)
        if state.estimates is None:  # the message and the coupling's S^T r per step
            per_round += products * 2 * steps
        else:  # the message per step; two copies refreshed, S x and S^T (S theta - S x) each
            per_round += products * (steps + 4)
        if config.map_kind == "orthonormal":
            per_round += sum(2 * b.size * b.node_dim * b.edge_dim**2 for b in layout.buckets)
    return per_round * rounds


def refresh_copies(
    state: CoordinateState,
    maps: tuple[Sequence[Rows], list[torch.Tensor] | None],
    own: list[torch.Tensor],
    theirs: list[torch.Tensor],
    held: list[torch.Tensor] | None,
    kind: str,
) -> None:
    """Both public copies of each edge heard, on this round's coordinates (CHOCO-SGD's
    ``xhat <- xhat + Q(x - xhat)``, Koloskova et al. 2019, Algorithm 2, with ``Q = S^+ S``):
    ``xhat_(j|e) += S^+ (S theta_j - S xhat_(j|e))`` from the message received and
    ``xhat_(i|e) += S^+ (S theta_i - S xhat_(i|e))`` from the message sent, so the copy of ``theta_i``
    that ``j`` holds and the one ``i`` holds are refreshed from the same numbers."""
    assert state.estimates is not None and state.own_copies is not None
    for copies, new in ((state.estimates, theirs), (state.own_copies, own)):
        _refresh(state, maps, copies, new, held, kind)


def _refresh(
    state: CoordinateState,
    maps: tuple[Sequence[Rows], list[torch.Tensor] | None],
    copies: list[torch.Tensor],
    new: list[torch.Tensor],
    held: list[torch.Tensor] | None,
    kind: str,
) -> None:
    """``x += S^+ (S theta - S x)`` per bucket, ``S theta`` given (``new [H_b, d_e]``), where heard."""
    assert state.layout is not None
    coords, dense = maps
    for k, (b, x) in enumerate(zip(state.layout.buckets, copies, strict=True)):
        if dense is None:  # selection: overwrite the round's coordinates
            local = coords[k][0 : b.size] - b.src_pos_on(x.device)[:, None] * x.shape[1]  # row-local
            values = new[k]
            if held is not None:
                values = torch.where(held[k][:, None], values, x.gather(1, local))
            x.scatter_(1, local, values)
            continue
        s = dense[k]
        gap = new[k] - torch.bmm(s, x.unsqueeze(-1)).squeeze(-1)
        if kind == "gaussian":  # S^+ = S^T (S S^T)^-1
            gap = torch.linalg.solve(torch.bmm(s, s.transpose(1, 2)), gap)
        step = torch.bmm(s.transpose(1, 2), gap.unsqueeze(-1)).squeeze(-1)
        if held is not None:
            step = torch.where(held[k][:, None], step, step.new_zeros(()))
        x.add_(step)


#: Model coordinates compared at once by :func:`expected_energy` when the supports change each round:
#: whole models are exchanged a group of edges at a time, never ``[H, d]`` at once.
ENERGY_CHUNK = 1 << 21


def expected_energy(state: CoordinateState, comm: Comm) -> float:
    """The expected sheaf energy ``sum_e a_e (d_e/m_e) ||Pi_i theta_i - Pi_j theta_j||^2`` over the
    supports, by an uncounted exchange of them (exact for fixed supports)."""
    layout = state.layout
    assert layout is not None
    if state.constant_coords is not None:
        parts = [
            state.thetas[b.cohort].reshape(-1)[c]
            for b, c in zip(layout.buckets, state.constant_coords, strict=True)
        ]
        sizes = layout.messages.sizes
        per_half = _squared_differences(layout.messages, torch.cat([p.reshape(-1) for p in parts]), comm)
    else:  # whole models: a group of edges at a time (the same groups on every process)
        sizes = layout.node_dims[layout.graph.src[layout.order]]
        device = state.thetas[0].device
        per_half = torch.zeros(len(sizes), dtype=torch.float64, device=device)
        for pos, local in _edge_groups(layout, ENERGY_CHUNK):
            parts = [
                state.thetas[b.cohort].index_select(
                    0, b.src_pos_on(device)[torch.as_tensor(r, device=device)]
                )
                for b, r in zip(layout.buckets, local, strict=True)
            ]
            mine = parts[0].view(-1) if len(parts) == 1 else torch.cat([p.reshape(-1) for p in parts])
            group = _group_layout(layout.messages, pos, sizes[pos])
            blocks = [(len(r), b.node_dim) for b, r in zip(layout.buckets, local, strict=True)]
            per_half[torch.as_tensor(pos, device=device)] = _squared_differences(group, mine, comm, blocks)
    a = layout.graph.half_edge_weights()[layout.order]
    weight = torch.as_tensor(a * layout.messages.sizes / sizes, dtype=torch.float64, device=per_half.device)
    return 0.5 * float(comm.all_sum((weight * per_half).sum()))  # each edge from both ends


def _edge_groups(layout: SheafLayout, elements: int) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """Groups of whole edges, about ``elements`` model coordinates each (both ends; by global edge
    id, so every process walks the same groups): the buffer positions held here, ascending, and per
    bucket their positions within it."""
    graph = layout.graph
    step = max(1, elements // (2 * int(layout.node_dims.max(initial=1))))
    edge_of = layout.order // 2
    by_edge = np.argsort(edge_of, kind="stable")
    starts = np.searchsorted(edge_of[by_edge], np.arange(0, graph.num_edges + step, step))
    firsts = np.array([b.first for b in layout.buckets], np.int64)
    for lo, hi in zip(starts[:-1], starts[1:], strict=True):
        pos = np.sort(by_edge[lo:hi])
        cuts = np.searchsorted(pos, np.append(firsts, len(layout.order)))
        local = [pos[cuts[k] : cuts[k + 1]] - b.first for k, b in enumerate(layout.buckets)]
        yield pos, local


def _group_layout(messages: EdgeLayout, pos: np.ndarray, sizes: np.ndarray) -> EdgeLayout:
    """The layout of the half-edges at buffer positions ``pos`` (ascending, whole edges) with payloads
    of ``sizes`` elements (the same at both ends): reverse half-edges by position within the group,
    ``-1`` where held elsewhere; global half-edge ids kept for the transport's plan."""
    rev = messages.rev[pos]
    at = np.minimum(np.searchsorted(pos, rev), max(len(pos) - 1, 0))
    inside = (rev >= 0) & (pos[at] == rev) if len(pos) else np.zeros(0, bool)
    assert messages.half_edges is not None
    return EdgeLayout(sizes, np.where(inside, at, -1), messages.half_edges[pos], sizes)


def _squared_differences(
    layout: EdgeLayout, mine: torch.Tensor, comm: Comm, blocks: list[tuple[int, int]] | None = None
) -> torch.Tensor:
    """``[H]`` float64: ``||mine_h - theirs_h||^2`` per half-edge of ``layout``, ``theirs`` the
    reverse half-edge's payload (the same size at both ends) by an uncounted exchange. ``blocks``:
    the payload is ``[r, d]`` blocks of rows, one row a half-edge (whole models), summed row by row
    rather than through an element-to-half-edge index."""
    theirs = comm.peek({"s": EdgeTensor(mine, layout)})["s"].data
    diff = mine - theirs
    if blocks is not None:
        sums, at = [], 0
        for rows, d in blocks:
            sums.append(diff[at : at + rows * d].view(rows, d).double().pow_(2).sum(1))
            at += rows * d
        return torch.cat(sums) if sums else diff.new_zeros(0, dtype=torch.float64)
    per_half = torch.zeros(len(layout.sizes), dtype=torch.float64, device=mine.device)
    counts = torch.as_tensor(layout.sizes, device=mine.device)
    where = torch.repeat_interleave(torch.arange(len(layout.sizes), device=mine.device), counts)
    per_half.index_add_(0, where, diff.double().pow_(2))
    return per_half
