"""The coupling term shared by the decentralized and personalised algorithms: its start-up
stability check and its value at an evaluation."""

from __future__ import annotations

import math

import torch

from ...config import ConfigError
from ...messages import Comm


def require_stable_coupling(
    alpha: float, lam: float, lambda_max: float, operator: str, maps: bool = True
) -> str | None:
    """Refuse ``alpha lam lambda_max >= 2`` (the coupling step ``theta <- theta - alpha lam L theta``
    then grows along the top eigenvector); a note when ``>= 1`` (``lambda_max`` is estimated from
    below, so the margin may be smaller than it looks).

    Args:
        alpha, lam: the theta step size and the coupling strength.
        lambda_max: the largest eigenvalue of the coupling operator ``L`` (sheaf or graph Laplacian).
        operator: its name, for the message.
        maps: whether the operator has restriction maps (the message then suggests ``map_scale``).
    Returns:
        A note for the user, or ``None``. Raises :class:`ConfigError` when unstable.
    """
    product = alpha * lam * lambda_max
    keys = "lower alpha or lam"
    if maps:
        keys += ", or scale the maps down (map_scale; the default scales them by 1/sqrt(d_i))"
    if not math.isfinite(product):  # e.g. maps so large that the power iteration overflows
        raise ConfigError(
            f"unstable configuration: the estimate of lambda_max ({operator}) is {lambda_max:.4g}, not a "
            f"finite number, so the coupling step cannot be stable; {keys}"
        )
    if product >= 2.0:
        raise ConfigError(
            f"unstable configuration: alpha*lam*lambda_max = {alpha:g}*{lam:g}*{lambda_max:.4g} = "
            f"{product:.3g} >= 2 ({operator}), so the coupling step diverges; {keys}; "
            "stability_check=false skips this check"
        )
    if product > 1.001:  # beyond exact averaging along the top eigenvector (lam shown to 4 digits)
        return (
            f"alpha*lam*lambda_max = {product:.3g} is close to the stability limit 2 ({operator}, "
            f"lambda_max estimated {lambda_max:.4g}); if the run diverges, {keys}"
        )
    return None


def coupling_energy(diff: torch.Tensor, lam: float, comm: Comm) -> tuple[float, float]:
    """``(lam/2 sum ||diff||^2, sum ||diff||^2)`` over the rows of ``diff`` (the clients held here)
    and those of every other process (``comm``'s sum)."""
    e = float(comm.all_sum((diff.double() ** 2).sum()))
    return 0.5 * lam * e, e
