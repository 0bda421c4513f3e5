"""BatchNorm in :mod:`.fused`'s grouped layout: per client and channel, the statistics of the
client's real samples (FedBN's rule, :class:`sheaf_fmtl.models.batchnorm.ClientBatchNorm`), the
hand-written backward, the running statistics after a batch, and evaluation.

Activations are ``[B, J, H, W]`` channels-last with ``J = C*ch`` (channel ``k`` of client ``c`` is
``j = c*ch + k``). With ``a_bj = m_cb / (n_c H W)`` (``m_cb`` 1 for a real sample, ``n_c`` the
client's real samples) the batch statistics are ``mean_j = sum_bhw a_bj x`` and ``var_j = sum_bhw
a_bj (x - mean_j)^2`` (biased, as in training), ``xhat = (x - mean) / sqrt(var + eps)`` and ``out =
gamma xhat + beta``. Since ``sum a (x - mean) = 0``, the input gradient is ``dx = gamma rstd (g -
a (sum g + xhat sum g xhat))`` (sums over ``b, h, w`` per channel), with ``dgamma = sum g xhat``
and ``dbeta = sum g``. Padding (``a = 0``, and a zero output gradient from the loss) gets a zero
input gradient. A batch without padding (every client's every row a real sample, ``a = 1 / (B H
W)``: plain batch statistics) takes ATen's own ``native_batch_norm`` and its backward instead, two
passes each where the weighted form takes five.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .fused_steps import Layer

#: What a training forward keeps for :func:`norm_backward`: tensors and ``eps``.
Saved = tuple[Any, ...]

Stats = dict[str, torch.Tensor]


@dataclass
class NormBatch:
    """The BatchNorm statistics of the rows of one fused call, by buffer name (``[C', ch]``
    ``running_mean`` / ``running_var``, ``[C']`` ``num_batches_tracked``). ``mask [C', B]``: a
    training batch (batch statistics of the real samples; ``stats`` entries replaced, new tensors,
    by those after the batch); ``None``: evaluation (the running statistics)."""

    stats: Stats
    mask: torch.Tensor | None = None
    full: bool = False  # every row of ``mask`` a real sample: plain batch statistics


def _per_sample(t: torch.Tensor) -> torch.Tensor:
    """``[B, J, H, W]`` channels-last as ``[B, H*W, J]`` (a view)."""
    b, j = t.shape[:2]
    return t.permute(0, 2, 3, 1).reshape(b, -1, j)


def _column(v: torch.Tensor) -> torch.Tensor:
    return v.view(1, -1, 1, 1)


def norm_forward(
    h: torch.Tensor,
    gamma: torch.Tensor | None,
    beta: torch.Tensor | None,
    layer: Layer,
    norms: NormBatch,
    clients: int,
) -> tuple[torch.Tensor, Saved]:
    """``(out, saved)`` of BatchNorm ``layer`` on grouped ``h`` (see the module docstring); in
    training ``saved = (xhat, gamma rstd, a)`` for :func:`norm_backward` and ``norms.stats`` holds
    the running statistics after the batch."""
    mean_key, var_key = f"{layer.name}.running_mean", f"{layer.name}.running_var"
    running_mean, running_var = norms.stats[mean_key], norms.stats[var_key]
    if norms.mask is None:  # evaluation: one affine map per channel
        out = F.batch_norm(
            h, running_mean.reshape(-1), running_var.reshape(-1), gamma, beta, False, 0.0, layer.eps
        )
        return out, ()
    batch, channels = h.shape[0], h.shape[1] // clients
    count = norms.mask.sum(1) * (h.shape[2] * h.shape[3])  # [C'] real positions a client-channel
    if norms.full:
        out, mean, invstd = torch.ops.aten.native_batch_norm(h, gamma, beta, None, None, True, 0.0, layer.eps)
        var = invstd.pow(-2).sub_(layer.eps)  # the biased batch variance
        _update(norms, layer, mean.view(clients, channels), var.view(clients, channels), count)
        return out, (h, gamma, mean, invstd, layer.eps)
    share = (norms.mask / count.clamp(min=1)[:, None]).t()  # [B, C']
    a = share[:, :, None].expand(batch, clients, channels).reshape(batch, -1)  # [B, J]
    mean = (_per_sample(h).sum(1) * a).sum(0)
    centred = h - _column(mean)
    var = (_per_sample(centred * centred).sum(1) * a).sum(0)
    rstd = torch.rsqrt(var + layer.eps)
    xhat = centred.mul_(_column(rstd))
    scale = rstd if gamma is None else rstd * gamma
    out = xhat if gamma is None else xhat * _column(gamma)
    if beta is not None:
        out = out + _column(beta)
    _update(norms, layer, mean.detach().view(clients, channels), var.detach().view(clients, channels), count)
    return out, (xhat, scale, a)


def _update(
    norms: NormBatch, layer: Layer, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor
) -> None:
    """The running statistics after the batch, as ``ClientBatchNorm._update`` writes them: momentum
    (or the cumulative average when ``momentum = None``) on the unbiased variance; a client without
    a sample keeps its own."""
    stats, name = norms.stats, layer.name
    tracked = stats[f"{name}.num_batches_tracked"]
    seen = count > 0
    tracked = tracked + seen.to(tracked.dtype)
    if layer.momentum is None:
        factor = (1.0 / tracked.clamp(min=1).to(mean.dtype))[:, None]
    else:
        factor = torch.full((), float(layer.momentum), dtype=mean.dtype, device=mean.device)
    unbiased = var * (count / (count - 1).clamp(min=1))[:, None]
    old_mean, old_var = stats[f"{name}.running_mean"], stats[f"{name}.running_var"]
    keep = seen[:, None]
    stats[f"{name}.running_mean"] = torch.where(keep, (1 - factor) * old_mean + factor * mean, old_mean)
    stats[f"{name}.running_var"] = torch.where(keep, (1 - factor) * old_var + factor * unbiased, old_var)
    stats[f"{name}.num_batches_tracked"] = tracked


def norm_backward(
    grad: torch.Tensor, saved: Saved, has_gamma: bool, has_beta: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(grad of the input, [grad of gamma, of beta])`` of a training BatchNorm (module docstring)."""
    if len(saved) == 5:  # native_batch_norm's
        h, gamma, mean, invstd, eps = saved
        wanted = [True, has_gamma, has_beta]
        dx, dgamma, dbeta = torch.ops.aten.native_batch_norm_backward(
            grad, h, gamma, None, None, mean, invstd, True, eps, wanted
        )
        return dx, [g for g, w in zip((dgamma, dbeta), wanted[1:], strict=True) if w]
    xhat, scale, a = saved
    dbeta = _per_sample(grad).sum((0, 1))
    dgamma = _per_sample(grad * xhat).sum((0, 1))
    batch = grad.shape[0]
    inner = torch.addcmul(_column(dbeta), xhat, _column(dgamma)).mul_(a.view(batch, -1, 1, 1))
    dx = (grad - inner).mul_(_column(scale))
    found = ([dgamma] if has_gamma else []) + ([dbeta] if has_beta else [])
    return dx, found
