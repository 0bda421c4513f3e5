"""One mini-batch gradient of a whole cohort of same-architecture CNNs in a few dozen kernels.

The ``C`` clients are the groups of grouped convolutions: activations are ``[B, C*ch, H, W]``
channels-last (memory ``[B, H, W, C, ch]``), a convolution of every client is one
``conv2d(groups=C)`` (oneDNN / cuDNN) and its backward one ``convolution_backward``; a linear layer
is one ``bmm`` over the clients on ``[C, B, features]``. The backward pass is written out by hand
(no autograd graph): cross-entropy ``softmax - onehot``, ``threshold_backward`` for ReLU,
``max_pool2d_with_indices_backward`` for pools, ``bmm`` for linear layers. Every parameter of every
client is gathered from the flat ``[C, d]`` stack by one ``index_select`` into layer-major order,
and the gradient is one ``cat`` back to ``[C, d]``. Per step this issues about 35 aten ops for the
paper's ``cnn`` (``benchmarks/step_ops.py`` counts them), whatever ``C``. A ``BatchNorm2d`` after a
convolution (kept per client, :mod:`sheaf_fmtl.models.batchnorm`) is a few elementwise ops and
reductions on the grouped layout (:mod:`.fused_norm`); its statistics come in and go out with the
call (:class:`NormBatch`).

The losses are those of :meth:`sheaf_fmtl.federation.Cohort.gradients`: ``f_i = sum_b w_ib
loss_ib + (l2 / 2) ||theta_i||^2`` with ``w_ib = mask_ib / sum_b mask_ib`` and the L2 term only for
clients with a sample (paper Section 5, "Evaluation"). Same models as :mod:`.grouped`
(:func:`.grouped.supports`).

Why one module (over 300 lines): the forward pass, the hand-written backward and the layer-major
parameter index share one plan of layers and one set of layout rules (which activations are in the
grouped layout, in which order conv weights lie); split apart, each half would restate the other's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .fused_norm import NormBatch, norm_backward, norm_forward
from .fused_plan import fusable, grouped_before, plan
from .fused_steps import Layer, conv_backward, flatten, linear_backward, to_grouped, unflatten
from .grouped import supports

__all__ = ["FusedCNN", "NormBatch", "exact_cudnn", "fusable", "supports"]


def exact_cudnn(x: torch.Tensor) -> contextlib.AbstractContextManager[object]:
    """cuDNN with TF32 off on CUDA (float32 convolutions, like ``bmm``); nothing on the CPU."""
    if not x.is_cuda:
        return contextlib.nullcontext()
    cudnn = torch.backends.cudnn
    return cudnn.flags(cudnn.enabled, cudnn.benchmark, deterministic=cudnn.deterministic, allow_tf32=False)


@dataclass(eq=False)
class FusedCNN:
    """The hand-written forward and backward of a :func:`.grouped.supports` model, for stacks of
    ``C`` clients' flat parameters (rows of ``[C, d]``, in ``module.named_parameters()`` order)."""

    module: nn.Sequential
    task: str
    layers: list[Layer] = field(init=False)
    dim: int = field(init=False)
    _perm: dict[tuple[Any, ...], tuple[Any, torch.Tensor]] = field(
        init=False, default_factory=dict, repr=False
    )
    # per mask (by identity; epoch masks are built once and reused): (mask, w_ib, -w_ib, has sample)
    _coefs: dict[tuple[Any, ...], tuple[Any, ...]] = field(init=False, default_factory=dict, repr=False)
    _weights: dict[int, tuple[Any, ...]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.layers, self.dim = plan(self.module)

    def _index(self, thetas: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """Positions in ``thetas.reshape(-1)`` (``[N, d]``) of the layer-major buffer of clients
        ``rows`` (all when ``None``): parameter after parameter, each ``[C, numel]`` contiguous, conv
        weights in channels-last order ``(out, kh, kw, ch)``. One ``index_select`` with it gathers
        every parameter of every client; one ``index_add_`` puts gradients back. Kept per ``rows``
        (an epoch's active clients are built once and come back every epoch)."""
        key = (thetas.shape[0], str(thetas.device), id(rows))
        found = self._perm.get(key)
        if found is None or found[0] is not rows:
            if len(self._perm) > 256:
                self._perm.clear()
            d = self.dim
            clients = torch.arange(thetas.shape[0]) if rows is None else rows.cpu()
            base = clients[:, None] * d
            parts = []
            for layer in self.layers:
                for slot in (layer.weight, layer.bias):
                    if slot is None:
                        continue
                    off, n, shape = slot
                    local = torch.arange(off, off + n)
                    if (
                        layer.kind == "conv" and slot is layer.weight
                    ):  # (out, ch, kh, kw) -> (out, kh, kw, ch)
                        local = local.view(shape).permute(0, 2, 3, 1).reshape(-1)
                    parts.append((base + local[None, :]).flatten())
            found = (rows, torch.cat(parts).to(thetas.device))
            self._perm[key] = found
        return found[1]

    def _views(
        self, flat: torch.Tensor, clients: int
    ) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        """Per layer ``(weight, bias)`` views of the layer-major buffer: conv weights
        ``[C*out, ch, kh, kw]`` channels-last and biases ``[C*out]``; linear weights ``[C, out, in]``,
        biases ``[C, out]``."""
        out: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []
        pos = 0
        for layer in self.layers:
            w = b = None
            for slot, is_weight in ((layer.weight, True), (layer.bias, False)):
                if slot is None:
                    continue
                _, n, shape = slot
                part = flat[pos : pos + clients * n]
                pos += clients * n
                if layer.kind == "conv" and is_weight:
                    o, ch, kh, kw = shape
                    t = part.view(clients * o, kh, kw, ch).permute(0, 3, 1, 2)
                elif layer.kind in ("conv", "norm"):
                    t = part.view(clients * shape[0])
                else:
                    t = part.view(clients, *shape)
                if is_weight:
                    w = t
                else:
                    b = t
            out.append((w, b))
        return out

    def loss_and_grad(
        self,
        thetas: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        l2: float,
        rows: torch.Tensor | None = None,
        stats: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f_i [N, d], f_i [N])`` of the ``N`` clients of ``thetas`` on rows ``x [C, B,
        *input_shape]``, labels ``y [C, B]`` and ``mask [C, B]`` (1 for a real sample) of clients
        ``rows`` (``None``: all, ``C = N``); the others get a zero gradient and ``f_i = 0``, as in
        :meth:`sheaf_fmtl.federation.Cohort.gradients`. With BatchNorm, ``stats`` holds the ``C``
        clients' statistics (:class:`NormBatch`), replaced by those after the batch."""
        clients, batch = x.shape[:2]
        _, weight, neg_weight, has, minus_one = self._mask_weights(mask)
        index = self._index(thetas, rows)
        params = self._views(thetas.reshape(-1).index_select(0, index), clients)
        norms = self._norm_batch(stats, mask)
        out, saved = self._forward(params, x, clients, batch, norms)
        if norms is not None and stats is not None:
            stats.update(norms.stats)
        grad_out, f = self._loss(out, y, weight, neg_weight, minus_one)
        flat = torch.cat(self._backward(params, saved, grad_out, clients, batch))  # layer-major
        g_coef, f_coef = self._l2_rows(thetas.shape[0], rows, has, mask, l2)
        g = thetas * g_coef if l2 > 0 else torch.zeros_like(thetas)
        g.view(-1).index_add_(0, index, flat)
        sq = torch.bmm(thetas[:, None, :], thetas[:, :, None]).view(-1) if l2 > 0 else None
        if rows is None:
            return g, f.view(-1) if sq is None else torch.addcmul(f.view(-1), sq, f_coef)
        f_full = thetas.new_zeros(thetas.shape[0]) if sq is None else sq.mul_(f_coef)
        return g, f_full.index_add_(0, rows, f.view(-1))

    def _norm_batch(
        self, stats: dict[str, torch.Tensor] | None, mask: torch.Tensor | None
    ) -> NormBatch | None:
        if not any(layer.kind == "norm" for layer in self.layers):
            return None
        if stats is None:
            raise ValueError("this model has BatchNorm layers: pass the clients' statistics (stats=)")
        # no padding in the batch: plain batch statistics (on CUDA one read of the device a step)
        full = mask is not None and bool(mask.min() > 0)
        return NormBatch(dict(stats), mask, full)

    def predict(
        self, thetas: torch.Tensor, x: torch.Tensor, stats: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Evaluation outputs ``[C, B, k]`` of the ``C`` clients of ``thetas`` on their rows ``x [C,
        B, *input_shape]``; BatchNorm with the running statistics ``stats`` (``nn.BatchNorm`` in eval
        mode). Nothing is kept for a backward pass."""
        clients, batch = x.shape[:2]
        params = self._views(thetas.reshape(-1).index_select(0, self._index(thetas, None)), clients)
        return self._forward(params, x, clients, batch, self._norm_batch(stats, None), keep=False)[0]

    def _forward(
        self,
        params: list[tuple[torch.Tensor | None, torch.Tensor | None]],
        x: torch.Tensor,
        clients: int,
        batch: int,
        norms: NormBatch | None = None,
        keep: bool = True,
    ) -> tuple[torch.Tensor, list[tuple[Any, ...]]]:
        """``(out [C, B, k], saved)``: the network's output on ``x [C, B, *input_shape]`` and, per
        layer, what :meth:`_backward` needs (tensors, or the shape to restore; only with ``keep``)."""
        h = x
        grouped_layout = False  # h is [B, C*ch, H, W] channels-last, else [C, B, ...]
        saved: list[tuple[Any, ...]] = []
        for layer, (w, b) in zip(self.layers, params, strict=True):
            if not keep:  # evaluation: hold no layer's input past its layer
                saved.clear()
            if layer.kind == "norm":
                assert norms is not None
                h, kept = norm_forward(h, w, b, layer, norms, clients)
                saved.append(kept)
            elif layer.kind == "unflatten":
                saved.append(tuple(h.shape))
                h = unflatten(h, layer, clients, batch)
            elif layer.kind == "conv":
                assert w is not None
                if not grouped_layout:
                    h = to_grouped(h, batch)
                    grouped_layout = True
                saved.append((h,))
                h = torch.conv2d(h, w, b, 1, layer.padding, 1, clients)
            elif layer.kind == "pool":
                assert layer.pool is not None
                kernel, stride, padding, ceil = layer.pool
                if not grouped_layout:
                    raise ValueError("FusedCNN supports max pools between convolutions only")
                pooled, idx = torch.ops.aten.max_pool2d_with_indices(h, kernel, stride, padding, [1, 1], ceil)
                saved.append((h, idx))
                h = pooled
            elif layer.kind == "relu":
                h = torch.relu(h)
                saved.append((h,))
            elif layer.kind == "flatten":
                h, shape = flatten(h, clients, batch, grouped_layout)
                saved.append(shape)
                grouped_layout = False
            else:  # linear on [C, B, in]
                assert w is not None
                saved.append((h,))
                h = (
                    torch.bmm(h, w.transpose(1, 2))
                    if b is None
                    else torch.baddbmm(b[:, None], h, w.transpose(1, 2))
                )
        return h, saved

    def _l2_rows(
        self, n: int, rows: torch.Tensor | None, has: torch.Tensor, mask: torch.Tensor, l2: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(l2 h_i [N, 1], l2/2 h_i [N])`` with ``h_i = 1`` for the clients of ``rows`` with a
        sample in ``mask`` (``has``), kept per ``(mask, rows)``."""
        if torch.compiler.is_compiling():  # a traced step: computed in the graph, never kept
            sample = has.view(-1)
            full = sample if rows is None else mask.new_zeros(n).index_copy_(0, rows, sample)
            return (l2 * full)[:, None], 0.5 * l2 * full
        key = (id(mask), id(rows), n, l2)
        found = self._coefs.get(key)
        if found is None or found[0] is not mask or found[1] is not rows:
            if len(self._coefs) > 256:
                self._coefs.clear()
            sample = has.view(-1)
            full = sample if rows is None else mask.new_zeros(n).index_copy_(0, rows, sample)
            found = (mask, rows, (l2 * full)[:, None], 0.5 * l2 * full)
            self._coefs[key] = found
        return found[2], found[3]

    def _mask_weights(self, mask: torch.Tensor) -> tuple[Any, ...]:
        """``(mask, w_ib [C, B], -w_ib, [C, 1] 1 for a client with a sample, -1 [C, B, 1])``, kept
        per mask: an epoch's masks come back every epoch, so a step spends no op on them."""
        found = None if torch.compiler.is_compiling() else self._weights.get(id(mask))
        if found is None or found[0] is not mask:
            if len(self._weights) > 256:  # fresh masks each step (random mini-batches): keep few
                self._weights.clear()
            count = mask.sum(1, keepdim=True)
            weight = mask / count.clamp(min=1)
            minus_one = mask.new_full((1, 1, 1), -1.0).expand(*mask.shape, 1)
            found = (mask, weight, -weight, (count > 0).to(mask.dtype), minus_one)
            if not torch.compiler.is_compiling():  # a traced step keeps nothing (graph values)
                self._weights[id(mask)] = found
        return found

    def _loss(
        self,
        out: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        neg_weight: torch.Tensor,
        minus_one: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(d f / d out [C, B, k], f [C, 1])`` of the weighted data loss, without the L2 term."""
        clients = y.shape[0]
        if self.task == "classification":
            logp = torch.log_softmax(out, -1)
            picked = logp.gather(-1, y[..., None])  # [C, B, 1]
            f = torch.bmm(neg_weight[:, None, :], picked).view(clients, 1)
            grad = torch.exp(logp).scatter_add_(-1, y[..., None], minus_one)
            return grad.mul_(weight[..., None]), f
        diff = out - y[..., None]  # squared loss on one output
        f = torch.bmm(weight[:, None, :], diff * diff).view(clients, 1)
        return diff.mul_(2 * weight[..., None]), f

    def _backward(
        self,
        params: list[tuple[torch.Tensor | None, torch.Tensor | None]],
        saved: list[Any],
        grad: torch.Tensor,
        clients: int,
        batch: int,
    ) -> list[torch.Tensor]:
        """Gradients per parameter, flat in the layer-major order of :meth:`_index`."""
        grads: list[torch.Tensor] = []
        first_param = next(k for k, layer in enumerate(self.layers) if layer.weight is not None)
        for k in range(len(self.layers) - 1, first_param - 1, -1):
            layer, (w, b), kept = self.layers[k], params[k], saved[k]
            need_input = k > first_param
            if layer.kind == "linear":
                assert w is not None
                grad, found = linear_backward(grad, kept[0], w, b, need_input)
                grads[:0] = found
            elif layer.kind == "relu":
                (out,) = kept
                grad = torch.ops.aten.threshold_backward(grad, out, 0)
            elif layer.kind == "norm":
                grad, found = norm_backward(grad, kept, layer.weight is not None, layer.bias is not None)
                grads[:0] = found
            elif layer.kind == "unflatten":
                grad = grad.reshape(kept)
            elif layer.kind == "flatten":
                grad = grad.reshape(kept)  # [C, B, ch, H, W] after convolutions, else the input's shape
                if len(kept) == 5 and k > 0 and grouped_before(self.layers, k):
                    grad = to_grouped(grad, batch)  # -> [B, C*ch, H, W] channels-last
            elif layer.kind == "pool":
                h_in, idx = kept
                kernel, stride, padding, ceil = layer.pool  # type: ignore[misc]
                grad = torch.ops.aten.max_pool2d_with_indices_backward(
                    grad, h_in, kernel, stride, padding, [1, 1], ceil, idx
                )
            elif layer.kind == "conv":
                assert w is not None
                grad, found = conv_backward(grad, kept[0], w, b, layer.padding, clients, need_input)
                grads[:0] = found
        return grads
