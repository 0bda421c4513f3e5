"""The plan of :mod:`.fused`'s cohort CNN: which models it takes (:func:`fusable`) and their layers
in the order it runs them (:func:`plan`), each with its parameter slots in one client's flat
``theta_i``."""

from __future__ import annotations

from torch import nn

from .batchnorm import ClientBatchNorm
from .fused_steps import Layer
from .grouped import supports

#: Layer kinds after which activations stay in the grouped (convolution) layout.
_KEEPS_GROUPED = ("relu", "pool", "norm")


def _is_norm2d(m: nn.Module) -> bool:
    return isinstance(m, ClientBatchNorm) and m.kind == "BatchNorm2d"


def fusable(module: nn.Module) -> bool:
    """:func:`.grouped.supports`, with per-client ``BatchNorm2d`` layers
    (:class:`~sheaf_fmtl.models.batchnorm.ClientBatchNorm`) allowed too."""
    return isinstance(module, nn.Sequential) and supports(
        nn.Sequential(*[m for m in module if not _is_norm2d(m)])
    )


def _pool_before_relu(layers: list[tuple[str, nn.Module]]) -> list[tuple[str, nn.Module]]:
    """``relu`` then ``max pool`` as ``max pool`` then ``relu`` (equal values and gradients, see
    :mod:`.grouped`): the relu and its backward run on 4x fewer elements."""
    out = list(layers)
    for k in range(len(out) - 1):
        if isinstance(out[k][1], nn.ReLU) and isinstance(out[k + 1][1], nn.MaxPool2d):
            out[k], out[k + 1] = out[k + 1], out[k]
    return out


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def plan(module: nn.Module) -> tuple[list[Layer], int]:
    """``(layers, d)`` of a :func:`fusable` ``module``; ``ValueError`` for a layer order the fused
    kernel does not run (a pool or BatchNorm outside the convolutions, a flatten of other dims)."""
    if not fusable(module):
        raise ValueError(
            "FusedCNN needs a Sequential of plain Conv2d, Linear, ReLU, MaxPool2d, Flatten and "
            "per-client BatchNorm2d"
        )
    slots, offset = {}, 0
    for name, p in module.named_parameters():
        slots[name] = (offset, p.numel(), tuple(p.shape))
        offset += p.numel()
    layers: list[Layer] = []
    for name, m in _pool_before_relu(list(module.named_children())):
        if isinstance(m, nn.Conv2d):
            pad = m.padding
            assert isinstance(pad, tuple)
            layers.append(
                Layer("conv", slots[f"{name}.weight"], slots.get(f"{name}.bias"), padding=_pair(pad))
            )
        elif isinstance(m, nn.Linear):
            layers.append(Layer("linear", slots[f"{name}.weight"], slots.get(f"{name}.bias")))
        elif isinstance(m, nn.ReLU):
            layers.append(Layer("relu"))
        elif isinstance(m, nn.MaxPool2d):
            stride = m.stride if m.stride is not None else m.kernel_size
            spec = (_pair(m.kernel_size), _pair(stride), _pair(m.padding), bool(m.ceil_mode))
            if _pair(m.dilation) != (1, 1):
                raise ValueError("FusedCNN supports max pools without dilation")
            layers.append(Layer("pool", pool=spec))
        elif _is_norm2d(m):
            assert isinstance(m, ClientBatchNorm)
            momentum = None if m.momentum is None else float(m.momentum)
            layers.append(
                Layer(
                    "norm",
                    slots.get(f"{name}.weight"),
                    slots.get(f"{name}.bias"),
                    shape=(m.num_features,),
                    name=name,
                    eps=float(m.eps),
                    momentum=momentum,
                )  # fmt: skip
            )
        elif isinstance(m, nn.Flatten):
            layers.append(Layer("flatten"))
        elif isinstance(m, nn.Unflatten):
            sizes = tuple(int(s) for s in m.unflattened_size)
            layers.append(Layer("unflatten", shape=sizes, dim=int(m.dim)))
    grouped_layout = False
    for layer in layers:  # pools and norms only between convolutions; flatten with its default dims
        grouped_layout = layer.kind == "conv" or (grouped_layout and layer.kind in _KEEPS_GROUPED)
        if layer.kind in ("pool", "norm") and not grouped_layout:
            raise ValueError("FusedCNN supports max pools and BatchNorm after a convolution only")
    flattens = [m for m in module.children() if isinstance(m, nn.Flatten)]
    if any((m.start_dim, m.end_dim) != (1, -1) for m in flattens):
        raise ValueError("FusedCNN supports Flatten() with its default dimensions only")
    return layers, offset


def grouped_before(layers: list[Layer], k: int) -> bool:
    """Whether the activations entering layer ``k`` are in the grouped (convolution) layout."""
    grouped_layout = False
    for layer in layers[:k]:
        grouped_layout = layer.kind == "conv" or (grouped_layout and layer.kind in _KEEPS_GROUPED)
    return grouped_layout
