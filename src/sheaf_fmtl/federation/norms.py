"""A cohort's BatchNorm statistics, one set per client (FedBN's rule; :mod:`sheaf_fmtl.models.batchnorm`).

The buffers of every :class:`~sheaf_fmtl.models.batchnorm.ClientBatchNorm` layer are stacked
``[C, ...]`` like the parameters but kept apart from them: a client's ``theta_i`` (what is trained,
exchanged, coupled and counted as sent) holds the affine weights, not the statistics. A training
gradient (``vmap`` over the clients of ``grad_and_value``) gives each client's module its own
statistics through ``functional_call`` and reads back the ones its forward pass wrote (copies made
inside the function, returned as the auxiliary output), so the update is functional under
``torch.func``. Evaluation passes the statistics in the same way, with no ``weights``: eval mode.
A CNN the fused kernel takes (:func:`sheaf_fmtl.models.fused.fusable`: ``BatchNorm2d`` after
convolutions) trains and evaluates there instead, its statistics passed in and out of the call
(:class:`sheaf_fmtl.models.fused.NormBatch`); the ``vmap`` path stays for the rest (dropout, user
losses, BatchNorm1d) and is its oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from ..models.batchnorm import norm_buffers
from ..models.fused import FusedCNN, exact_cudnn

Stats = dict[str, torch.Tensor]


class Stacked(Protocol):
    """What these statistics read of their :class:`~sheaf_fmtl.federation.Cohort`."""

    module: nn.Module
    l2: float
    cnn_kernel: str
    _fused: FusedCNN | None

    @property
    def size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def _fused_now(self) -> bool: ...

    def predict_group(self, x: torch.Tensor) -> int: ...

    def _fused_grad(
        self,
        thetas: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        active: torch.Tensor | None,
        stats: Stats | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]: ...

    def _per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...


class CohortNorms:
    """The stacked statistics of one cohort's BatchNorm ``layers`` and the batched functions that
    read and write them."""

    def __init__(self, cohort: Stacked, layers: list[str]) -> None:
        self.cohort, self.layers = cohort, layers
        self.stats: Stats = {}
        self._grad: Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, Stats]]] = vmap(
            grad_and_value(self._loss, has_aux=True)
        )
        self.predict: Callable[..., torch.Tensor] = vmap(self._forward)
        self.reset()

    def initial(self, size: int) -> Stats:
        """The module's own statistics (``running_mean = 0``, ``running_var = 1`` for a fresh layer),
        repeated for ``size`` clients."""
        device = self.cohort.device
        return {
            k: v.detach().to(device).expand(size, *v.shape).clone()
            for k, v in norm_buffers(self.cohort.module, self.layers).items()
        }

    def reset(self) -> None:
        """Every client back to the module's initial statistics (a run's start)."""
        self.stats = self.initial(self.cohort.size)

    def _given(self, flat: torch.Tensor, stats: Stats, weights: torch.Tensor | None) -> Stats:
        given = {**self.cohort.unflatten(flat), **stats}
        if weights is not None:
            given.update({f"{layer}.weights": weights for layer in self.layers})
        return given

    def _forward(self, flat: torch.Tensor, stats: Stats, x: torch.Tensor) -> torch.Tensor:
        return cast("torch.Tensor", functional_call(self.cohort.module, self._given(flat, stats, None), (x,)))

    def _loss(
        self,
        flat: torch.Tensor,
        stats: Stats,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        noise: Stats,
    ) -> tuple[torch.Tensor, Stats]:
        """``f_i`` in train mode (batch statistics of the real samples, dropout from ``noise``) and,
        as the auxiliary output, the statistics after the batch."""
        cohort, count = self.cohort, mask.sum()
        new = {k: v.clone() for k, v in stats.items()}  # written by the forward pass
        given = {**self._given(flat, new, mask), **{f"{n}.noise": v for n, v in noise.items()}}
        out = functional_call(cohort.module, given, (x,))
        data = (cohort._per_sample(out, y) * mask).sum() / count.clamp(min=1)
        f = data + (count > 0).to(flat.dtype) * 0.5 * cohort.l2 * (flat * flat).sum()
        return f, new

    def gradients(
        self,
        thetas: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        active: torch.Tensor | None,
        noise: Stats | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f_i, f_i)`` of the batch's clients (``active``: those rows only), each client's
        statistics updated by its batch. Rows that are not the cohort's clients (a probe on a few
        of them) start from the initial statistics and keep nothing."""
        rows = thetas if active is None else thetas.index_select(0, active)
        own = len(thetas) == self.cohort.size
        stats = self.stats if own else self.initial(len(thetas))
        if active is not None:
            stats = {k: v.index_select(0, active) for k, v in stats.items()}
        if noise is None and self.cohort._fused_now():  # takes the active rows itself, full g and f
            new = dict(stats)
            g, f = self.cohort._fused_grad(thetas, x, y, mask, active, new)
            self._keep(own, active, new)
            return g, f
        g, (f, new) = self._grad(rows, stats, x, y, mask, noise or {})
        self._keep(own, active, new)
        if active is None:
            return g, f
        return (
            torch.zeros_like(thetas).index_copy_(0, active, g),
            thetas.new_zeros(len(thetas)).index_copy_(0, active, f),
        )

    def _keep(self, own: bool, active: torch.Tensor | None, new: Stats) -> None:
        """The cohort's statistics after a batch of its own rows (``active``: those clients')."""
        if own:
            if active is None:
                self.stats = new
            else:
                self.stats = {k: v.index_copy(0, active, new[k]) for k, v in self.stats.items()}

    def outputs(self, thetas: torch.Tensor, x: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
        """Eval-mode outputs ``[C, B, ...]`` with each client's running statistics (the fused kernel
        in groups of ``cohort.group`` clients, as the im2col predictions); ``rows``: ``thetas`` are
        the cohort's clients at these positions (else all of them, or rows that are not its clients,
        which take the initial statistics)."""
        if rows is not None:
            stats = {n: v[rows] for n, v in self.stats.items()}
        else:
            stats = self.stats if len(thetas) == self.cohort.size else self.initial(len(thetas))
        fused = self.cohort._fused
        if fused is None or self.cohort.cnn_kernel != "fused":
            return self.predict(thetas, stats, x)
        g = self.cohort.predict_group(x)
        with exact_cudnn(x):
            parts = [
                fused.predict(thetas[k : k + g], x[k : k + g], {n: v[k : k + g] for n, v in stats.items()})
                for k in range(0, len(thetas), g)
            ]
        return torch.cat(parts)

    def per_client(self) -> list[Stats]:
        """Each client's statistics (CPU copies), in the cohort's order."""
        host = {k: v.detach().cpu() for k, v in self.stats.items()}
        return [{k: v[c].clone() for k, v in host.items()} for c in range(self.cohort.size)]

    def load(self, per_client: list[Stats]) -> None:
        """Put back :meth:`per_client` (one mapping per client of the cohort, in its order)."""
        device = self.cohort.device
        self.stats = {k: torch.stack([s[k] for s in per_client]).to(device) for k in self.stats}
