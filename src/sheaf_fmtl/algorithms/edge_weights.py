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

    ``rho_e = (N_ij + N_ji) / (R_ij + R_ji)``,   ``a_e = clip(2 (1 - rho_e), 0, 1)``:

0 where the neighbour's values are no better than forgetting (``rho >= 1``), 1 where they cost at
most half of it (``rho <= 1/2``); symmetric, so the coupling stays zero-sum, and at most 1, so the
stability bound of the unweighted graph holds. For models that moved from a common start by
``u_i`` and ``u_j`` of equal size, on a quadratic loss ``rho = 2 (1 - cos(u_i, u_j))`` in the loss's
metric: unrelated updates give ``rho ~ 2``, identical ones 0.

The coupling term becomes ``sum_j a_e S^T (S theta_i - S theta_j)`` (times the graph's own weight,
when it has one). Edges start at ``a_e = 1`` (until the first averages are exchanged). A message
lost on an exchange round leaves that end's weight and average as they were until the next.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..federation import Cohort
from ..sheaf.layout import SheafLayout

#: Rounds between two exchanges of the averages (and two probes): the weights change every EVERY rounds.
EVERY = 5
#: Averaging factor of the two estimates per probe (``0.9 ** EVERY``: about the last ten rounds).
BETA = 0.9**EVERY
#: Training samples of a client in its probe (the first ones of its fixed evaluation subsample).
PROBE_SAMPLES = 64


def probe_losses(model: Cohort, rows: torch.Tensor, clients: torch.Tensor) -> torch.Tensor:
    """``f`` (the data term, mean over the probe) of each row of ``rows [R, d]`` on the probe of the
    cohort's client at position ``clients[r]``."""
    x, y, n = model._eval_subsample()
    k = min(PROBE_SAMPLES, x.shape[1])
    xs, ys = x[clients, :k], y[clients, :k]
    valid = (torch.arange(k, device=n.device) < n[clients, None].clamp(max=k)).to(rows.dtype)
    out = model._predict(rows, xs)
    per = model._per_sample(out.reshape(-1, *out.shape[2:]), ys.reshape(-1)).view(len(rows), k)
    return (per * valid).sum(1) / valid.sum(1).clamp(min=1)


def signals(
    models: Sequence[Cohort],
    layout: SheafLayout,
    thetas: list[torch.Tensor],
    initial: list[torch.Tensor],
    coords: list[torch.Tensor],
    theirs: list[torch.Tensor],
) -> list[torch.Tensor]:
    """Per bucket ``[H_b, 2]``: ``(n_ij, r_ij)`` of each half-edge (module docstring); ``coords``:
    the flat positions in ``thetas[c].view(-1)`` of the coordinates each half-edge coupled."""
    out = []
    with torch.no_grad():
        for b, c, v in zip(layout.buckets, coords, theirs, strict=True):
            theta = thetas[b.cohort]
            pos = b.src_pos_on(theta.device)
            local = c - pos[:, None] * theta.shape[1]
            rows = theta.index_select(0, pos)
            start = initial[b.cohort].index_select(0, pos)
            neighbour = rows.scatter(1, local, v.to(rows.dtype))
            forgotten = rows.scatter(1, local, start.gather(1, local))
            f = probe_losses(models[b.cohort], torch.cat([rows, neighbour, forgotten]), pos.repeat(3))
            own, nb, fg = f.view(3, -1)
            out.append(torch.stack([nb - own, fg - own], 1))
    return out


def averaged(previous: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
    """The exponential moving average of the signals (the first probe starts it)."""
    return BETA * previous + (1.0 - BETA) * now


def weights(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    """``a_e = clip(2 (1 - rho_e), 0, 1)``, ``rho_e = (N_ij + N_ji) / (R_ij + R_ji)``, per half-edge
    from both ends' averages
    ``[H, 2]`` (the same number at both ends: the sums commute); 0 where forgetting costs nothing."""
    total = mine + theirs
    ratio = total[:, 0] / total[:, 1].clamp(min=torch.finfo(total.dtype).tiny)
    a = (2.0 * (1.0 - ratio)).clamp(0.0, 1.0)
    return torch.where(total[:, 1] > 0, a, torch.zeros_like(a))
