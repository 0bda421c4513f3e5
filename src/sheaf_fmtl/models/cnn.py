"""CNNs of the paper's image experiments (Section 5, "Model architecture", and the heterogeneous
architecture Table ``tab:heterogeneous_cnn_architectures``).

All builders take ``(input_shape, num_outputs)`` with ``input_shape = (C, H, W)`` (or ``(H, W)``,
read as one channel) and use no in-place activations, so they run under
``torch.func.functional_call`` + ``vmap`` + ``grad`` (one call per cohort). The paper's CNNs are
stateless; ``cnn-bn`` has BatchNorm, whose statistics each client keeps as its own (FedBN's rule,
:mod:`sheaf_fmtl.models.batchnorm`; its affine weights are parameters, exchanged).

Choices (the paper gives filters and layer counts, not kernels; these land on its parameter counts):

=========  ===============================================================  ==========  ==========
name       layers                                                           1x28x28     3x32x32
=========  ===============================================================  ==========  ==========
cnn        conv3x3(32)-pool2-conv3x3(64)-pool2-fc(out)   (Experiment 1)        34,826      42,442
cnn-small  conv5x5(16)-pool2-fc(out)                     (Table: 23K / 28K)    23,466      32,586
cnn-medium conv5x5(24,pad2)-pool2-conv5x5(48,pad2)-fc    (Table: 121K / 154K) 123,562     153,562
cnn-large  conv3x3(32)-pool2-conv3x3(64)-pool2-fc120-fc  (Table: 212K / 297K) 212,146     297,202
cnn-bn     ``cnn`` with BatchNorm after each conv             (not in the paper)   35,018      42,634
=========  ===============================================================  ==========  ==========

Every conv is followed by ReLU; pools are 2x2 max pools; convs are unpadded unless marked.
The Table's Small counts (23K on MNIST, 28K on CIFAR) are not both reachable with one kernel size
and pooling; ``cnn-small`` matches the MNIST count exactly and is 16% over on CIFAR.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _channels_first(input_shape: tuple[int, ...]) -> tuple[list[nn.Module], tuple[int, int, int]]:
    """Leading layers that bring inputs to ``[B, C, H, W]``, and that shape."""
    if len(input_shape) == 3:
        c, h, w = input_shape
        return [], (c, h, w)
    if len(input_shape) == 2:
        h, w = input_shape
        return [nn.Unflatten(1, (1, h))], (1, h, w)
    raise ValueError(f"CNN models need image inputs (C, H, W) or (H, W); got feature shape {input_shape}")


def _flat_size(layers: list[nn.Module], shape: tuple[int, int, int]) -> int:
    with torch.no_grad():
        return math.prod(nn.Sequential(*layers)(torch.zeros(1, *shape)).shape[1:])


def _build(
    input_shape: tuple[int, ...],
    convs: list[tuple[int, int, int, bool]],
    hidden: list[int],
    num_outputs: int,
    norm: bool = False,
) -> nn.Sequential:
    """``convs``: ``(out_channels, kernel, padding, pool_after)``; then flatten and FC layers;
    ``norm``: a ``BatchNorm2d`` after each conv."""
    lead, shape = _channels_first(input_shape)
    body: list[nn.Module] = []
    channels = shape[0]
    for out, kernel, pad, pool in convs:
        body += [
            nn.Conv2d(channels, out, kernel, padding=pad),
            *([nn.BatchNorm2d(out)] if norm else []),
            nn.ReLU(),
        ]
        if pool:
            body.append(nn.MaxPool2d(2))
        channels = out
    body.append(nn.Flatten())
    width = _flat_size(body, shape)
    for h in hidden:
        body += [nn.Linear(width, h), nn.ReLU()]
        width = h
    body.append(nn.Linear(width, num_outputs))
    return nn.Sequential(*lead, *body)


def cnn(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """Experiment-1 CNN: two convs (32, 64 filters) and one FC layer (34,826 params on 1x28x28)."""
    return _build(input_shape, [(32, 3, 0, True), (64, 3, 0, True)], [], num_outputs)


def cnn_small(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """Table "Small": one conv (16 filters), one FC layer."""
    return _build(input_shape, [(16, 5, 0, True)], [], num_outputs)


def cnn_medium(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """Table "Medium": two convs (24, 48 filters), one FC layer."""
    return _build(input_shape, [(24, 5, 2, True), (48, 5, 2, False)], [], num_outputs)


def cnn_large(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """Table "Large": two convs (32, 64 filters), FC with 120 hidden units, FC out."""
    return _build(input_shape, [(32, 3, 0, True), (64, 3, 0, True)], [120], num_outputs)


def cnn_bn(input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    """The Experiment-1 CNN with a BatchNorm after each conv (statistics kept per client)."""
    return _build(input_shape, [(32, 3, 0, True), (64, 3, 0, True)], [], num_outputs, norm=True)


CNN_MODELS = {
    "cnn": cnn,
    "cnn-small": cnn_small,
    "cnn-medium": cnn_medium,
    "cnn-large": cnn_large,
    "cnn-bn": cnn_bn,
}
