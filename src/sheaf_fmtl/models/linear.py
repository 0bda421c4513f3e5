"""Multinomial logistic regression and linear regression (the paper's tabular models), and their
outputs and closed-form gradients for a stack of clients at once (batched matmuls)."""

from __future__ import annotations

import math

import torch
from torch import nn


def logistic(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """``softmax(W x + b)`` over flattened inputs; ``d = num_classes * (features + 1)``."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def linear(input_shape: tuple[int, ...], num_outputs: int = 1) -> nn.Module:
    """``w^T x + b`` over flattened inputs (regression); ``d = features + 1``."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_outputs))


def linear_shape(module: nn.Module) -> tuple[int, int] | None:
    """``(inputs, outputs)`` when ``module`` is ``Flatten`` then one ``Linear`` with bias (the models
    above), so that its gradients can be taken in closed form; otherwise ``None``."""
    layers = list(module) if isinstance(module, nn.Sequential) else []
    if len(layers) == 2 and isinstance(layers[0], nn.Flatten) and isinstance(layers[1], nn.Linear):
        if layers[1].bias is not None:
            return layers[1].in_features, layers[1].out_features
    return None


def linear_parts(thetas: torch.Tensor, io: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``theta = [vec(W) row-major, b]`` per row of ``thetas [C, d]`` -> ``(W [C, out, in], b [C, out])``."""
    n_in, n_out = io
    return thetas[:, : n_out * n_in].view(-1, n_out, n_in), thetas[:, n_out * n_in :]


def linear_forward(thetas: torch.Tensor, x: torch.Tensor, io: tuple[int, int]) -> torch.Tensor:
    """``z = W_c x + b_c`` for every client ``c``: ``thetas [C, d]``, ``x [C, B, ...]`` -> ``[C, B, out]``."""
    w, b = linear_parts(thetas, io)
    return torch.baddbmm(b.unsqueeze(1), x.reshape(*x.shape[:2], -1), w.transpose(1, 2))


def linear_gradients(
    thetas: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    mask: torch.Tensor,
    io: tuple[int, int],
    task: str,
    l2: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form ``(grad f_c [C, d], f_c [C])`` of the L2-regularised local losses of ``W x + b``
    models, all clients in batched matmuls (paper Section 5, "Evaluation": cross-entropy for
    classification, squared loss for regression).

    ``dz = (softmax(z) - onehot(y)) / n`` (cross-entropy) or ``2 (z - y) / n`` (squared loss),
    ``grad W = dz^T X``, ``grad b = sum dz``, plus ``l2 theta``; ``n`` counts the samples with
    ``mask = 1``; a client without any sample has ``f = 0`` and a zero gradient.

    Args:
        thetas: ``[C, d]`` flat parameters, ``d = out (in + 1)``.
        x, y, mask: ``[C, B, ...]`` inputs, ``[C, B]`` labels (class ids or targets), ``[C, B]`` 0/1.
        io: ``(in, out)`` from :func:`linear_shape`.
        task: ``classification`` or ``regression``.
        l2: the L2 coefficient inside ``f``.
    """
    xs = x.reshape(*x.shape[:2], -1)
    z = linear_forward(thetas, x, io)  # [C, B, out]
    count = mask.sum(1)
    weight = (mask / count.clamp(min=1).unsqueeze(1)).unsqueeze(-1)
    if task == "classification":
        logp = torch.log_softmax(z, -1)
        per = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        dz = logp.exp().scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(per).unsqueeze(-1)) * weight
    else:
        diff = z.squeeze(-1) - y
        per = diff * diff
        dz = 2 * diff.unsqueeze(-1) * weight
    has = (count > 0).to(thetas.dtype)
    f = (per * mask).sum(1) / count.clamp(min=1) + has * 0.5 * l2 * (thetas * thetas).sum(1)
    g = torch.cat([torch.bmm(dz.transpose(1, 2), xs).flatten(1), dz.sum(1)], 1)
    return g + (has * l2).unsqueeze(1) * thetas, f
