"""Multinomial logistic regression and linear regression (the paper's tabular models)."""

from __future__ import annotations

import math

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
