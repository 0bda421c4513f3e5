"""The user's models, loss and metric in a federation (:mod:`sheaf_fmtl.models.user`): which
clients share an architecture (one cohort each), and the checks run before any training, each
refusing in one line (a model that fails on its data, an output of the wrong shape, class ids the
model cannot output, a loss that is not a mean over samples, a forward pass ``torch.func`` cannot
batch)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.base import FederatedDataset
from ..models.user import (
    ModelError,
    ModelFactory,
    UserLoss,
    UserMetric,
    architecture,
    check_module,
    model_factory,
    probe,
)
from ..plugins import first_line, is_held, is_spec, resolve
from .cohort import Cohort


def is_user_model(part: str) -> bool:
    """Whether one entry of config key ``model`` names user code (not a built-in model)."""
    return is_spec(part) or is_held(part)


@dataclass
class UserModels:
    """Client ``i``'s module (checked) and architecture, for the clients whose ``model`` entry names
    user code; modules are built under a forked random state (the run's draws are untouched)."""

    factories: dict[str, ModelFactory]
    modules: dict[int, nn.Module]
    archs: dict[int, tuple[Any, ...]]

    @classmethod
    def build(cls, parts: list[str], dataset: FederatedDataset, outputs: int) -> UserModels:
        n = dataset.num_clients
        factories = {p: model_factory(p, resolve("model", p), n) for p in set(parts) if is_user_model(p)}
        modules: dict[int, nn.Module] = {}
        with torch.random.fork_rng(devices=[]):
            for i in range(n):
                part = parts[i % len(parts)]
                if part in factories:
                    made = factories[part](i, dataset.feature_shape(i), outputs)
                    modules[i] = check_module(made, f"config key 'model' = '{part}': client {i}'s model")
        return cls(factories, modules, {i: architecture(m) for i, m in modules.items()})

    def maker(self, part: str, shape: tuple[int, ...], outputs: int) -> Callable[[int], nn.Module]:
        """Client id -> a fresh checked module (what the cohort's initial models are drawn from)."""
        make = self.factories[part]
        return lambda i: check_module(
            make(i, shape, outputs), f"config key 'model' = '{part}': client {i}'s model"
        )


def objective(dataset: FederatedDataset) -> tuple[UserLoss | None, UserMetric | None]:
    """The user's loss and metric named by the dataset's ``loss`` / ``metric`` (``auto``: none)."""
    loss = None if dataset.loss == "auto" else UserLoss(resolve("loss", dataset.loss), dataset.loss)
    metric = (
        None if dataset.metric == "auto" else UserMetric(resolve("metric", dataset.metric), dataset.metric)
    )
    return loss, metric


def preflight(cohort: Cohort, dataset: FederatedDataset, user_model: bool) -> None:
    """The checks of the module docstring on the cohort's first samples (:class:`ModelError`)."""
    label = f"config key 'model' = '{cohort.model_name}'"
    sizes = cohort.n_host.tolist()
    row = int(np.argmax(sizes))  # the client with the most samples: the loss check wants two
    client, b = int(cohort.clients[row]), min(2, sizes[row])
    at = torch.tensor([row], device=cohort.device)
    x, y = (t[0].cpu() for t in cohort.train_rows(torch.arange(b, device=at.device)[None], at))
    out = probe(copy.deepcopy(cohort.module).cpu(), x, f"{label}: client {client}'s model")
    classify = dataset.task == "classification"
    if classify and (cohort.loss_fn is None or cohort.metric_fn is None):
        if out.ndim != 2:
            raise ModelError(
                f"{label}: client {client}'s model outputs {list(out.shape)} for {b} samples; classification "
                f"expects one score per class [{b}, classes]"
            )
        _check_labels(cohort, dataset, int(out.shape[1]), label)
    if not classify and cohort.loss_fn is None and tuple(out.shape) not in ((b,), (b, 1)):
        raise ModelError(
            f"{label}: client {client}'s model outputs {list(out.shape)} for {b} samples; regression with "
            f"the squared loss expects one value per sample [{b}, 1] (or give a loss of your own)"
        )
    if isinstance(cohort.loss_fn, UserLoss) and b >= 2:
        cohort.loss_fn.check(out, y)
    if isinstance(cohort.metric_fn, UserMetric):
        cohort.metric_fn.check(out, y)
    if user_model or cohort.loss_fn is not None:
        _check_batched(cohort, label)


def _check_labels(cohort: Cohort, dataset: FederatedDataset, width: int, label: str) -> None:
    for i in cohort.clients.tolist():
        c = dataset.clients[i]
        top = max([int(a.max()) for a in (c.y_train, c.y_test) if len(a)], default=0)
        if top >= width:
            raise ModelError(
                f"{label}: client {i}'s class ids reach {top} but its model outputs {width} scores "
                f"(class ids must lie in 0..{width - 1})"
            )


def _check_batched(cohort: Cohort, label: str) -> None:
    """One batched gradient on two samples of at most two clients, from the template's parameters."""
    k = min(2, cohort.size)
    theta = torch.cat([p.detach().reshape(-1) for p in cohort.module.parameters()])
    thetas = theta.to(cohort.device).expand(k, -1).clone()
    b = min(2, cohort.train.n_max)
    mask = (torch.arange(b, device=cohort.n_train.device) < cohort.n_train[:k, None]).to(torch.float32)
    try:
        dev = cohort.device
        x, y = cohort.train_rows(torch.arange(b, device=dev).expand(k, -1), torch.arange(k, device=dev))
        g, _ = cohort.gradients(thetas, (x, y, mask))
    except Exception as e:
        raise ModelError(
            f"{label}: the clients' batched gradient (torch.func vmap + grad) failed: {type(e).__name__}: "
            f"{first_line(e)}; the forward pass must not branch on values or call .item()"
        ) from None
    if g.shape != thetas.shape:  # pragma: no cover - torch.func returns the parameters' shape
        raise ModelError(f"{label}: gradient of shape {list(g.shape)}, expected {list(thetas.shape)}")
