"""Edge weights learned from what neighbours exchange: how related two clients' tasks are
(``edge_weights = relatedness``, the default of the coordinate modes).

Each round, the half-edge ``i -> j`` has coupled coordinates ``S`` (this round's selection, the
shared features or slices, or the proxy's) and client ``i`` holds ``S theta_j`` (the message it
received), ``S theta_i`` and its own initial model ``theta_i(0)``. On a fixed probe of its own
training samples it measures what its neighbour's values of those coordinates cost it, against
what forgetting them (its initial values) costs:

    ``n_ij = f_i(theta_i + S^T (S theta_j - S theta_i)) - f_i(theta_i)``,
    ``r_ij = f_i(theta_i + S^T (S theta_i(0) - S theta_i)) - f_i(theta_i)``.

A neighbour whose task is unrelated is no better than knowing nothing (``n ~ r``); a related
neighbour's values cost little (``n << r``). Every ``EVERY`` rounds (5) the client probes, and
averages the probes over time (exponential moving averages ``N``, ``R``, factor ``beta``, about the
last ten rounds); both ends of the edge send their averages with that round's message (two numbers
per half-edge every five rounds, counted in the bits), so both compute the same weight, which holds
until the next exchange:

    ``rho_e = (N_ij + N_ji) / (R_ij + R_ji)``,   ``a_e = clip(2 (1.2 - rho_e), 0, 1)``:

1 where the neighbour's values cost at most 0.7 of what forgetting costs, 0 from 1.2 times it up
(the two ends chosen on a validation split of the built-in problems: the largest mean gain over
local training that loses on none); symmetric, so the coupling stays zero-sum, and at most 1, so the
stability bound of the unweighted graph holds. For models that moved from a common start by
``u_i`` and ``u_j`` of equal size, on a quadratic loss ``rho = 2 (1 - cos(u_i, u_j))`` in the loss's
metric: unrelated updates give ``rho ~ 2``, identical ones 0.

The coupling term becomes ``sum_j a_e S^T (S theta_i - S theta_j)`` (times the graph's own weight,
when it has one). Edges start at ``a_e = 1`` (until the first averages are exchanged). A message
lost on an exchange round leaves that end's weight and average as they were until the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...federation import Cohort
from ...messages import EdgeTensor, Payload
from ...sheaf.coordinate_rows import Rows
from ...sheaf.layout import SheafLayout
from .coordinate_state import CoordinateState

#: Rounds between two exchanges of the averages (and two probes): the weights change every EVERY rounds.
EVERY = 5
#: Averaging factor of the two estimates per probe (``0.9 ** EVERY``: about the last ten rounds).
BETA = 0.9**EVERY
#: ``rho`` at and below which an edge weighs 1 (0 from ``RELATED_BELOW + 0.5`` up); chosen on a
#: validation split of the built-in problems (results page), never on test data.
RELATED_BELOW = 0.7
#: Training samples of a client in its probe (the first ones of its fixed evaluation subsample).
PROBE_SAMPLES = 64


#: Most rows evaluated at once by :func:`probe_losses`: each gathers its client's probe, so memory
#: is bounded by a chunk (at most ``PROBE_CHUNK x PROBE_SAMPLES`` samples, and within the cohort's
#: evaluation budget, :meth:`~sheaf_fmtl.federation.Cohort.eval_block`), not by the half-edges.
PROBE_CHUNK = 4096


def probe_chunk(model: Cohort) -> int:
    """Rows a probe chunk holds: :data:`PROBE_CHUNK`, fewer where the cohort's evaluation budget
    (input elements of :data:`PROBE_SAMPLES` samples a row) says so."""
    return min(PROBE_CHUNK, model.eval_block(PROBE_SAMPLES))


def probe_losses(model: Cohort, rows: torch.Tensor, clients: torch.Tensor) -> torch.Tensor:
    """``f`` (the data term, mean over the probe) of each row of ``rows [R, d]`` on the probe of the
    cohort's client at position ``clients[r]``, :func:`probe_chunk` rows at a time."""
    return probe_losses_of(model, [rows], clients)[0]


def probe_losses_of(
    model: Cohort, row_sets: Sequence[torch.Tensor], clients: torch.Tensor
) -> list[torch.Tensor]:
    """:func:`probe_losses` of several ``[R, d]`` row sets on the same clients' probes: each chunk's
    probe samples gathered once for all the sets."""
    idx, n = model._eval_subsample()
    k = min(PROBE_SAMPLES, idx.shape[1])
    out: list[list[torch.Tensor]] = [[] for _ in row_sets]
    chunk = probe_chunk(model)
    for s in range(0, len(clients), chunk):
        who = clients[s : s + chunk]
        valid = (torch.arange(k, device=n.device) < n[who, None].clamp(max=k)).to(row_sets[0].dtype)
        x, y = model.train_rows(idx.index_select(0, who)[:, :k], who)
        for losses, rows in zip(out, row_sets, strict=True):
            pred = model._predict(rows[s : s + chunk], x)
            per = model._per_sample(pred.reshape(-1, *pred.shape[2:]), y.reshape(-1)).view(len(who), k)
            losses.append((per * valid).sum(1) / valid.sum(1).clamp(min=1))
    return [torch.cat(o) if o else rows.new_zeros(0) for o, rows in zip(out, row_sets, strict=True)]


def signals(
    models: Sequence[Cohort],
    layout: SheafLayout,
    thetas: list[torch.Tensor],
    initial: list[torch.Tensor],
    coords: Sequence[Rows],
    theirs: list[torch.Tensor],
) -> list[torch.Tensor]:
    """Per bucket ``[H_b, 2]``: ``(n_ij, r_ij)`` of each half-edge (module docstring); ``coords``:
    the flat positions in ``thetas[c].view(-1)`` of the coordinates each half-edge coupled. The
    probed models (a neighbour's values, or the start's, in place of the coupled coordinates) are
    built :func:`probe_chunk` half-edges at a time, never ``[H, d]`` at once."""
    out = []
    with torch.no_grad():
        for b, c, v in zip(layout.buckets, coords, theirs, strict=True):
            theta, model = thetas[b.cohort], models[b.cohort]
            pos = b.src_pos_on(theta.device)
            every = torch.arange(len(theta), device=theta.device)  # each client's own loss, once
            own = probe_losses(model, theta, every).index_select(0, pos)
            nb, fg, chunk = [], [], probe_chunk(model)
            for s in range(0, len(pos), chunk):
                part = slice(s, s + chunk)
                at = pos[part]
                local = c[part] - at[:, None] * theta.shape[1]
                rows = theta.index_select(0, at)
                start = initial[b.cohort].index_select(0, at)
                neighbour = rows.scatter(1, local, v[part].to(rows.dtype))
                forgotten = rows.scatter(1, local, start.gather(1, local))
                f_nb, f_fg = probe_losses_of(model, [neighbour, forgotten], at)  # one gather of the probes
                nb.append(f_nb)
                fg.append(f_fg)
            both = [torch.cat(nb), torch.cat(fg)] if nb else [own, own]
            out.append(torch.stack([both[0] - own, both[1] - own], 1))
    return out


def averaged(previous: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
    """The exponential moving average of the signals (the first probe starts it)."""
    return BETA * previous + (1.0 - BETA) * now


def weights(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """``a_e = clip(2 (1.2 - rho_e), 0, 1)``, ``rho_e = (N_ij + N_ji) / (R_ij + R_ji)``, per half-edge
    from both ends' averages
    ``[H, 2]`` (the same number at both ends: the sums commute); 0 where forgetting costs nothing."""
    total = mine + theirs
    ratio = total[:, 0] / total[:, 1].clamp(min=torch.finfo(total.dtype).tiny)
    a = (2.0 * (RELATED_BELOW + 0.5 - ratio)).clamp(0.0, 1.0)
    return torch.where(total[:, 1] > 0, a, torch.zeros_like(a))


def held_once(stack: torch.Tensor) -> torch.Tensor:
    """A copy of the models ``stack [C, d]``; one row read ``C`` times (a stride-0 view) where every
    row is the same (``init = common``, the default): ``d`` floats a cohort instead of ``C d``."""
    if len(stack) > 1 and bool((stack == stack[:1]).all()):
        return stack[:1].clone().expand_as(stack)
    return stack.clone()


class Relatedness:
    """The learned weights of one run's coordinate coupling: what is sent, the weights of a round,
    and what ``checkpoint.pt`` records (the weights of every exchange round, ``EVERY`` apart)."""

    def __init__(self) -> None:
        self.pair_layout: Any = None

    def start(self, state: CoordinateState) -> None:
        """The initial models (what forgetting returns to; :func:`held_once`) and the layout of two
        numbers a half-edge."""
        assert state.layout is not None
        state.initial = [held_once(t) for t in state.thetas]
        twos = np.full(len(state.layout.messages.sizes), 2, np.int64)
        self.pair_layout = state.layout.messages.with_sizes(twos, twos)

    def payload(self, state: CoordinateState) -> EdgeTensor:
        """This end's averages ``(N, R)`` of each half-edge (zeros before the first probe)."""
        assert state.layout is not None
        buckets = state.layout.buckets
        mine = state.relatedness or [state.thetas[b.cohort].new_zeros(b.size, 2) for b in buckets]
        pairs = torch.cat(mine) if mine else state.thetas[0].new_zeros(0, 2)
        return EdgeTensor(pairs.reshape(-1), self.pair_layout)

    def weights(
        self,
        state: CoordinateState,
        models: Sequence[Cohort],
        coords: Sequence[Rows],
        incoming: Payload,
        theirs: list[torch.Tensor],
        heard: list[torch.Tensor] | None,
    ) -> list[torch.Tensor]:
        """This round's weights per bucket ``[H_b]``: ``a_e`` (1 until both ends have averages) times
        the graph's own; every :data:`EVERY` rounds recomputed from the averages both ends sent, and
        this round's probes folded into the averages."""
        if state.round % EVERY == 0:
            self._exchange_round(state, models, coords, incoming, theirs, heard)
            assert state.learned_weights is not None
            state.weight_trace.append(torch.cat(state.learned_weights).detach())  # on the device: no sync
        learned = state.learned_weights
        assert learned is not None
        if state.weights is None:
            return learned
        return [a * w for a, w in zip(learned, state.weights, strict=True)]

    @staticmethod
    def _exchange_round(
        state: CoordinateState,
        models: Sequence[Cohort],
        coords: Sequence[Rows],
        incoming: Payload,
        theirs: list[torch.Tensor],
        heard: list[torch.Tensor] | None,
    ) -> None:
        """New weights from both ends' averages, and this round's probes averaged in; an edge whose
        message did not arrive (``heard [H_b]`` False) keeps its weight and its average."""
        layout = state.layout
        assert layout is not None and state.initial is not None
        got = incoming["relatedness"]
        assert isinstance(got, EdgeTensor)
        flat = got.data.view(-1, 2)
        received = [flat[b.first : b.first + b.size] for b in layout.buckets]
        before, kept = state.relatedness, state.learned_weights
        if before is None:
            learned = [r.new_ones(len(r)) for r in received]
        else:
            learned = [weights(m, r) for m, r in zip(before, received, strict=True)]
        now = signals(models, layout, state.thetas, state.initial, coords, theirs)
        updated = now if before is None else [averaged(p, n) for p, n in zip(before, now, strict=True)]
        if heard is not None and before is not None and kept is not None:
            learned = [torch.where(h, n, o) for h, n, o in zip(heard, learned, kept, strict=True)]
            updated = [torch.where(h[:, None], n, o) for h, n, o in zip(heard, updated, before, strict=True)]
        state.learned_weights, state.relatedness = learned, updated

    def saved(self, state: CoordinateState, layout: SheafLayout) -> dict[str, torch.Tensor]:
        """``edge_weights [2E]`` per graph half-edge (the last round's; 1 before the first round) on
        the half-edges held here, zero elsewhere; ``edge_weight_history [K, E]`` (float32), each
        graph edge's weight at the exchange rounds ``edge_weight_rounds [K]`` (``0, EVERY, 2 EVERY,
        ...``), filled by the process holding the edge's first half-edge (zero elsewhere)."""
        graph, order = layout.graph, torch.as_tensor(layout.order)
        final = torch.zeros(graph.num_half_edges, dtype=torch.float64)
        final[order] = 1.0
        if state.learned_weights is not None:
            final[order] = torch.cat(state.learned_weights).detach().cpu().double()
        first = torch.as_tensor(layout.order % 2 == 0)  # each edge once: its half-edge i -> j, i < j
        edges = torch.as_tensor(layout.order // 2)[first]
        history = torch.zeros(len(state.weight_trace), graph.num_edges, dtype=torch.float32)
        for k, w in enumerate(state.weight_trace):
            history[k, edges] = w.detach().cpu().float()[first]
        rounds = torch.arange(len(state.weight_trace), dtype=torch.int64) * EVERY
        return {"edge_weights": final, "edge_weight_history": history, "edge_weight_rounds": rounds}
