"""One forward pass for a whole cohort of same-architecture CNNs, as batched matrix products.

Client ``c``'s parameters are row ``c`` of stacked tensors. Activations are kept channels-last,
``[C, B, H, W, ch]``, so that a convolution is one im2col copy (:func:`_im2col`) and one ``bmm``
over the clients, ``[C, B*H'*W', k_h*k_w*ch] @ [C, k_h*k_w*ch, out]``, and its backward two more
``bmm`` (:class:`_Conv`); max pools run on a channels-last view, before the ReLU that precedes them;
a linear layer is one ``bmm``. ``torch.func.grad`` of the summed per-client losses gives every
client's gradient in one backward pass (the losses are independent). ``sheaf-fmtl bench`` compares
it with a per-client loop (measured in benchmarks/README.md, "Against the performance targets").

Mini-batch gradients with the task's loss take :mod:`.fused` on the CPU (one grouped convolution
for all clients, a hand-written backward, about 35 aten ops a step); this module is the forward of
evaluation, and the gradient path of user losses and (until measured there) of CUDA.

Supports ``nn.Sequential`` of Conv2d (stride 1, no dilation, one group, zero padding), Linear,
ReLU, MaxPool2d, Flatten and Unflatten; :func:`supports` says whether a module qualifies.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

_SUPPORTED = (nn.Conv2d, nn.Linear, nn.ReLU, nn.MaxPool2d, nn.Flatten, nn.Unflatten)


def _plain_conv(m: nn.Conv2d) -> bool:
    return (
        m.stride == (1, 1)
        and m.dilation == (1, 1)
        and m.groups == 1
        and m.padding_mode == "zeros"
        and not isinstance(m.padding, str)
    )


def supports(module: nn.Module) -> bool:
    """Sequential models made of the layers above, with at least one (plain) convolution."""
    if not isinstance(module, nn.Sequential):
        return False
    layers = list(module)
    convs = [m for m in layers if isinstance(m, nn.Conv2d)]
    plain = all(_plain_conv(m) for m in convs)
    return bool(convs) and plain and all(isinstance(m, _SUPPORTED) for m in layers)


def _im2col(x: torch.Tensor, kh: int, kw: int) -> torch.Tensor:
    """``[C, B, H, W, ch] -> [C, B, H', W', kh, kw, ch]`` (contiguous): every patch of every sample."""
    clients, batch, h, w, ch = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    if ch >= 8:  # one strided copy (~2.5x faster than kh * kw slice copies when rows are long)
        s = x.stride()
        return x.as_strided((clients, batch, ho, wo, kh, kw, ch), (*s[:4], s[2], s[3], s[4])).contiguous()
    cols = x.new_empty(clients, batch, ho, wo, kh, kw, ch)  # few channels: slice copies are faster
    for i in range(kh):
        for j in range(kw):
            cols[:, :, :, :, i, j].copy_(x[:, :, i : i + ho, j : j + wo])
    return cols


class _Conv(torch.autograd.Function):
    """Per-client convolution of channels-last ``x: [C, B, H, W, ch]`` with ``w: [C, kh*kw*ch, out]``
    (rows ordered ``(kh, kw, ch)``) and ``b: [C, out]`` by im2col + ``bmm``. Returns ``(y, cols)``;
    ``cols`` is kept for the weight gradient, the input gradient is a col2im of ``dy @ w^T``."""

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, kernel: tuple[int, int]) -> Any:
        clients, batch, h, wd, ch = x.shape
        kh, kw = kernel
        ho, wo = h - kh + 1, wd - kw + 1
        cols = _im2col(x, kh, kw).view(clients, batch * ho * wo, kh * kw * ch)
        y = torch.baddbmm(b.unsqueeze(1), cols, w)
        return y.view(clients, batch, ho, wo, -1), cols

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, w, _, kernel = inputs
        ctx.save_for_backward(output[1], w)
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # no zero gradient for cols (a large fill per call)
        ctx.kernel, ctx.in_shape = kernel, x.shape

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor, _: Any) -> Any:
        cols, w = ctx.saved_tensors
        clients, batch, h, wd, ch = ctx.in_shape
        kh, kw = ctx.kernel
        ho, wo = h - kh + 1, wd - kw + 1
        dy2 = dy.reshape(clients, batch * ho * wo, -1)
        dw = torch.bmm(cols.transpose(1, 2), dy2)
        db = dy2.sum(1)
        dx = None
        if ctx.needs_input_grad[0]:
            dcols = torch.bmm(dy2, w.transpose(1, 2)).view(clients, batch, ho, wo, kh, kw, ch)
            dx = dy.new_zeros(clients, batch, h, wd, ch)
            for i in range(kh):
                for j in range(kw):
                    dx[:, :, i : i + ho, j : j + wo].add_(dcols[:, :, :, :, i, j])  # `+=` would copy back
        return dx, dw, db, None


def conv2d_nhwc(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: tuple[int, int]
) -> torch.Tensor:
    """``x: [C, B, H, W, ch]``, ``weight: [C, out, ch, kh, kw]`` -> ``[C, B, H', W', out]``."""
    clients, out, ch, kh, kw = weight.shape
    ph, pw = padding
    if ph or pw:
        x = F.pad(x, (0, 0, pw, pw, ph, ph))
    w = weight.permute(0, 3, 4, 2, 1).reshape(clients, kh * kw * ch, out)
    b = bias if bias is not None else weight.new_zeros(clients, out)
    return cast("torch.Tensor", _Conv.apply(x.contiguous(), w, b, (kh, kw))[0])  # type: ignore[no-untyped-call]


def _pool_nhwc(x: torch.Tensor, layer: nn.MaxPool2d) -> torch.Tensor:
    """Max pool of ``[C, B, H, W, ch]`` through a channels-last ``[C*B, ch, H, W]`` view."""
    clients, batch, h, w, ch = x.shape
    out = layer(x.reshape(clients * batch, h, w, ch).permute(0, 3, 1, 2))
    return cast(
        "torch.Tensor", out.permute(0, 2, 3, 1).reshape(clients, batch, out.shape[2], out.shape[3], ch)
    )


def _pool_before_relu(layers: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """``relu`` then ``max pool`` equals ``max pool`` then ``relu`` (relu is monotone; the gradient
    reaches the same input either way), and the relu then runs on 4x fewer elements."""
    out = list(layers)
    for k in range(len(out) - 1):
        if isinstance(out[k][1], nn.ReLU) and isinstance(out[k + 1][1], nn.MaxPool2d):
            out[k], out[k + 1] = out[k + 1], out[k]
    return out


def forward(module: nn.Sequential, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``x: [C, B, *input_shape]``, ``params[name]: [C, *shape]`` -> outputs ``[C, B, ...]``."""
    clients, batch = x.shape[:2]
    h = x.reshape(clients * batch, *x.shape[2:])
    nhwc = False  # h is [C, B, H, W, ch] (between convolutions) or [C * B, ...] (per-sample rows)
    for name, layer in _pool_before_relu(list(module.named_children())):
        if isinstance(layer, nn.Conv2d):
            if not nhwc:  # [C * B, ch, H, W] -> [C, B, H, W, ch]
                h = h.reshape(clients, batch, *h.shape[1:]).permute(0, 1, 3, 4, 2)
                nhwc = True
            pad = layer.padding
            assert isinstance(pad, tuple)
            h = conv2d_nhwc(h, params[f"{name}.weight"], params.get(f"{name}.bias"), (pad[0], pad[1]))
        elif nhwc and isinstance(layer, nn.ReLU):
            h = torch.relu(h)
        elif nhwc and isinstance(layer, nn.MaxPool2d):
            h = _pool_nhwc(h, layer)
        else:
            if nhwc:  # back to per-sample rows in NCHW order (what Flatten expects)
                h = h.permute(0, 1, 4, 2, 3).reshape(clients * batch, *h.shape[4:], *h.shape[2:4])
                nhwc = False
            if isinstance(layer, nn.Linear):
                w = params[f"{name}.weight"]  # [C, out, in]
                h = torch.bmm(h.reshape(clients, batch, -1), w.transpose(1, 2))
                if f"{name}.bias" in params:
                    h = h + params[f"{name}.bias"].unsqueeze(1)
                h = h.reshape(clients * batch, -1)
            else:
                h = layer(h)
    if nhwc:
        h = h.permute(0, 1, 4, 2, 3).reshape(clients * batch, -1)
    return h.reshape(clients, batch, *h.shape[1:])
