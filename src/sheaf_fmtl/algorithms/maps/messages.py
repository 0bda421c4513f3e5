"""Per-half-edge message helpers of Sheaf-FMTL: the scalars ``||theta_i||^2`` of compact mode,
which received elements arrived, and the residuals ``r_ij = P_ij theta_i - P_ji theta_j`` (paper eq.
(19) ``pijaupdate``) with the terms of missing messages zeroed."""

from __future__ import annotations

import torch

from ...messages import EdgeTensor, ServerTensor
from ...sheaf.layout import SheafLayout


def sq_norms(layout: SheafLayout, thetas: list[torch.Tensor]) -> torch.Tensor:
    """``||theta_i||^2`` for the source of every half-edge, in message-buffer order.

    Args:
        layout: the sheaf layout (buckets of half-edges).
        thetas: per cohort ``[C, d]``.
    Returns:
        ``[H]``, one value per held half-edge (sent with the messages in compact mode).
    """
    norms = [(t * t).sum(1) for t in thetas]  # per client, then spread over its half-edges
    return torch.cat([b.sources(norms) for b in layout.buckets])


def spread_heard(received: EdgeTensor | ServerTensor) -> torch.Tensor | None:
    """``received.heard`` (one flag per half-edge) spread over the message elements.

    Returns:
        ``[sum d_ij]`` bool, or ``None`` when every message arrived.
    """
    if not isinstance(received, EdgeTensor) or received.heard is None:
        return None
    return received.heard.index_select(0, received.layout.element_positions(received.heard.device))


def masked_residual(
    mine: torch.Tensor,
    theirs: torch.Tensor,
    heard: torch.Tensor | None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """``a_ij r_ij = a_ij (mine - theirs)`` per message element, zero where the neighbour's message
    did not arrive (``heard`` False), so that edge's terms are skipped.

    Args:
        mine: ``[sum d_ij]`` ``P_ij theta_i``.
        theirs: ``[sum d_ij]`` ``P_ji theta_j`` as received.
        heard: ``[sum d_ij]`` bool or ``None`` (all arrived).
        weights: ``[sum d_ij]`` the edge weight ``a_ij`` of each element, or ``None`` (unweighted).
    Returns:
        ``[sum d_ij]`` residuals, weighted.
    """
    r = mine - theirs  # scaled and masked in place: one buffer
    if weights is not None:
        r.mul_(weights)
    return r if heard is None else r.masked_fill_(~heard, 0.0)
