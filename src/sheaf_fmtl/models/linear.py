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
