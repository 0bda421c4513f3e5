"""The plan's layers (:class:`Layer`) and the per-layer steps of :mod:`.fused`'s cohort CNN: the
grouped channels-last layout in and out of a linear layer, and the hand-written backward of a
linear and a grouped convolution layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Layer:
    """One layer of the plan: its kind, its parameter slots in the layer-major buffer and shapes."""

    kind: str  # conv, linear, relu, pool, flatten (to [C, B, features]), unflatten, norm (BatchNorm2d)
    weight: tuple[int, int, tuple[int, ...]] | None = None  # (offset, numel, shape) in one client
    bias: tuple[int, int, tuple[int, ...]] | None = None
    padding: tuple[int, int] = (0, 0)
    pool: tuple[tuple[int, int], tuple[int, int], tuple[int, int], bool] | None = None
    shape: tuple[int, ...] = ()  # unflatten: the sizes that per-sample dimension ``dim`` becomes
    dim: int = 0
    name: str = ""  # norm: the layer's name in the module (its statistics' keys)
    eps: float = 0.0  # norm
    momentum: float | None = None  # norm (None: the cumulative average)


def to_grouped(h: torch.Tensor, batch: int) -> torch.Tensor:
    """``[C, B, ch, H, W]`` -> ``[B, C*ch, H, W]`` channels-last (memory ``[B, H, W, C, ch]``): the
    layout of the grouped convolutions, for activations and for their gradients."""
    hh, ww = h.shape[3:]
    return h.permute(1, 3, 4, 0, 2).contiguous().permute(0, 3, 4, 1, 2).reshape(batch, -1, hh, ww)


def unflatten(h: torch.Tensor, layer: Layer, clients: int, batch: int) -> torch.Tensor:
    """``h [C, B, *sample]`` with per-sample dimension ``layer.dim`` split into ``layer.shape``."""
    sample = list(h.shape[2:])
    d = layer.dim - 1 if layer.dim > 0 else len(sample) + layer.dim
    return h.reshape(clients, batch, *sample[:d], *layer.shape, *sample[d + 1 :])


def flatten(
    h: torch.Tensor, clients: int, batch: int, grouped_layout: bool
) -> tuple[torch.Tensor, tuple[int, ...]]:
    """``(h [C, B, features], the shape its gradient goes back to)``: from the grouped layout each
    sample is flattened as NCHW (gradient shape ``[C, B, ch, H, W]``), else ``h``'s own shape."""
    if grouped_layout:
        _, cc, hh, ww = h.shape
        shape = (clients, batch, cc // clients, hh, ww)
        return h.view(batch, clients, -1, hh, ww).transpose(0, 1).reshape(clients, batch, -1), shape
    return h.reshape(clients, batch, -1), tuple(h.shape)


def linear_backward(
    grad: torch.Tensor, h_in: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, need_input: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(grad of the input (or ``grad`` itself when not needed), [flat grad of w, of b])`` of a
    linear layer on ``[C, B, in]``."""
    found = [torch.bmm(grad.transpose(1, 2), h_in).view(-1)]
    if b is not None:
        found.append(grad.sum(1).view(-1))
    return (torch.bmm(grad, w) if need_input else grad), found


def conv_backward(
    grad: torch.Tensor,
    h_in: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    padding: tuple[int, int],
    clients: int,
    need_input: bool,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(grad of the input (``None`` when not needed), [flat grad of w, of b])`` of a grouped
    convolution, the weight's gradient in the channels-last order of :meth:`FusedCNN._index`."""
    dx, dw, db = torch.ops.aten.convolution_backward(
        grad,
        h_in,
        w,
        None if b is None else [b.shape[0]],
        [1, 1],
        list(padding),
        [1, 1],
        False,
        [0, 0],
        clients,
        [need_input, True, b is not None],
    )
    found = [dw.permute(0, 2, 3, 1).reshape(-1)]  # a view when dw is channels-last
    if b is not None:
        found.append(db.view(-1))
    return dx, found
