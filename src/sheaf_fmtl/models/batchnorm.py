"""BatchNorm kept per client (FedBN's rule): :class:`ClientBatchNorm` replaces every
``nn.BatchNorm1d/2d/3d`` of a model, so that its running statistics are given per client, like the
parameters, and its training statistics leave out the padding of smaller clients.

Its affine ``weight`` and ``bias`` are parameters: part of a client's ``theta_i``, trained and
exchanged as every other parameter. Its buffers ``running_mean``, ``running_var`` and
``num_batches_tracked`` are a client's own: stacked per cohort beside the parameters
(:class:`sheaf_fmtl.federation.Cohort`), never exchanged, never coupled, never counted as sent.

Train or eval is set by the ``weights`` buffer, as :class:`sheaf_fmtl.models.user.SeededDropout`
is set by its noise: with ``weights`` (``[B]``, 1 for a real sample, 0 for padding; set per client
by the cohort on a training batch) the layer normalises with the batch statistics of the real
samples and updates its running statistics as PyTorch's ``nn.BatchNorm`` does in train mode
(momentum, or the cumulative average when ``momentum=None``; the unbiased variance); without
(evaluation) it is ``nn.BatchNorm`` in eval mode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

#: Each :class:`ClientBatchNorm` layer's per-client buffers, in this order.
NORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class ClientBatchNorm(nn.Module):
    """``nn.BatchNorm`` with per-sample ``weights`` in training (module docstring)."""

    running_mean: torch.Tensor
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor
    weights: torch.Tensor

    def __init__(self, bn: _BatchNorm) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = bn.num_features, bn.eps, bn.momentum
        self.kind = type(bn).__name__
        self.weight = None if bn.weight is None else nn.Parameter(bn.weight.detach().clone())
        self.bias = None if bn.bias is None else nn.Parameter(bn.bias.detach().clone())
        for name in NORM_BUFFERS:
            self.register_buffer(name, getattr(bn, name).detach().clone())
        self.register_buffer("weights", torch.empty(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weights
        if w.numel() == 0:  # evaluation: the running statistics
            return F.batch_norm(
                x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        dims = [0, *range(2, x.ndim)]
        shape = [1, -1] + [1] * (x.ndim - 2)
        wx = w.view(-1, *[1] * (x.ndim - 1)).to(x.dtype)
        count = w.sum() * (x[0, 0].numel() if x.ndim > 2 else 1)
        mean = (x * wx).sum(dims) / count.clamp(min=1)
        var = (((x - mean.view(shape)) ** 2) * wx).sum(dims) / count.clamp(min=1)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.weight is not None:
            out = out * self.weight.view(shape)
        if self.bias is not None:
            out = out + self.bias.view(shape)
        self._update(mean.detach(), var.detach(), count)
        return out

    def _update(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        """The running statistics after one training batch, written into the buffers (each client's
        own copies under ``torch.func.functional_call``); a client without a sample keeps its own."""
        seen = count > 0
        tracked = self.num_batches_tracked + seen.to(self.num_batches_tracked.dtype)
        if self.momentum is None:  # cumulative moving average
            factor = 1.0 / tracked.clamp(min=1).to(mean.dtype)
        else:
            factor = torch.full((), float(self.momentum), dtype=mean.dtype, device=mean.device)
        unbiased = var * count / (count - 1).clamp(min=1)
        new_mean = torch.where(seen, (1 - factor) * self.running_mean + factor * mean, self.running_mean)
        new_var = torch.where(seen, (1 - factor) * self.running_var + factor * unbiased, self.running_var)
        self.running_mean.copy_(new_mean)
        self.running_var.copy_(new_var)
        self.num_batches_tracked.copy_(tracked)

    def extra_repr(self) -> str:
        return f"{self.kind}({self.num_features}, eps={self.eps}, momentum={self.momentum})"


def refusal(module: nn.Module) -> str | None:
    """Why ``module``'s buffers cannot be kept per client (``None``: they can): a persistent buffer
    of a layer other than a tracking ``nn.BatchNorm`` (non-persistent buffers are constants, shared)."""
    for name, m in module.named_modules():
        if isinstance(m, _BatchNorm) and not m.track_running_stats:
            return (
                f"has a {type(m).__name__} with track_running_stats=False ({name}), which normalises "
                "evaluation batches by their own statistics; keep track_running_stats=True (the default)"
            )
        own = [b for b, _ in m.named_buffers(recurse=False) if b not in m._non_persistent_buffers_set]
        if own and not isinstance(m, _BatchNorm | ClientBatchNorm):
            prefix = f"{name}." if name else ""
            return (
                f"has buffers ({', '.join(prefix + b for b in own[:3])}) of a {type(m).__name__}: only "
                "BatchNorm statistics are kept per client here; make the rest parameters or constants"
            )
    return None


def client_norms(module: nn.Module) -> list[str]:
    """Replace every ``nn.BatchNorm`` of ``module`` by :class:`ClientBatchNorm` (in place) and return
    the names of its :class:`ClientBatchNorm` layers."""
    for name, m in list(module.named_modules()):
        if name and isinstance(m, _BatchNorm):
            parent = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
            setattr(parent, name.rpartition(".")[2], ClientBatchNorm(m))
    return [n for n, m in module.named_modules() if isinstance(m, ClientBatchNorm)]


def norm_buffers(module: nn.Module, layers: list[str]) -> dict[str, torch.Tensor]:
    """The per-client buffers of ``layers`` of ``module``, by their names in ``module``."""
    bufs = dict(module.named_buffers())
    return {f"{layer}.{b}": bufs[f"{layer}.{b}"] for layer in layers for b in NORM_BUFFERS}


def set_buffers(module: nn.Module, stats: dict[str, torch.Tensor] | None) -> nn.Module:
    """``module`` with one client's BatchNorm statistics (``None``: as it is) copied into its buffers of
    those names (``nn.BatchNorm`` and :class:`ClientBatchNorm` name them alike); returns ``module``."""
    if stats:
        bufs = dict(module.named_buffers())
        missing = sorted(set(stats) - set(bufs))
        if missing:
            raise ValueError(f"the model has no buffer {missing[0]} for the saved BatchNorm statistics")
        with torch.no_grad():
            for name, value in stats.items():
                bufs[name].copy_(value)
    return module
