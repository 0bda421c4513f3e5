"""Model factory by name. A client's ``theta_i`` is the flat vector of all its parameters."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .cnn import CNN_MODELS
from .linear import linear, logistic

ModelBuilder = Callable[[tuple[int, ...], int], nn.Module]
MODELS: dict[str, ModelBuilder] = {"logistic": logistic, "linear": linear, **CNN_MODELS}


def build_model(name: str, input_shape: tuple[int, ...], num_outputs: int) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(sorted(MODELS))}")
    return MODELS[name](input_shape, num_outputs)


def default_model(task: str) -> str:
    """The paper's tabular choice: logistic regression to classify, linear regression to regress."""
    return "logistic" if task == "classification" else "linear"
