"""Clients stacked by architecture (*cohorts*): padded data, flat thetas, batched local gradients.

A cohort's thetas are ``[C, d]``; its local losses ``f_i`` (L2-regularised cross-entropy or squared
loss, paper Section 5 "Evaluation") and their mini-batch gradients are computed for all ``C`` clients
at once, never client by client: closed-form batched matmuls for logistic / linear regression,
im2col convolutions batched over clients (:mod:`.models.grouped`) with one ``torch.func.grad`` per
group of clients for CNNs, and ``torch.func``
(``vmap`` + ``functional_call`` + ``grad``) for any other model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from .data.base import FederatedDataset
from .models import build_model, default_model, grouped
from .models.linear import linear_shape

EVAL_CHUNK = 512  # samples per client per evaluation chunk
GROUP_CLIENTS = 4  # clients per batched CNN call (see Cohort._grouped_grad)


def _pad(
    arrays: list[np.ndarray], dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    n = torch.tensor([len(a) for a in arrays], dtype=torch.long)
    n_max = max(1, int(n.max()))
    out = torch.zeros((len(arrays), n_max, *arrays[0].shape[1:]), dtype=dtype)
    for k, a in enumerate(arrays):
        out[k, : len(a)] = torch.as_tensor(a, dtype=dtype)
    return out.to(device), n.to(device)


@dataclass(eq=False)
class Cohort:
    """Clients that share one architecture (same model name and input shape, so the same ``d``)."""

    index: int
    clients: np.ndarray
    model_name: str
    module: nn.Module
    task: str
    l2: float
    x_train: torch.Tensor  # [C, n_max, *feature_shape]
    y_train: torch.Tensor  # [C, n_max]
    n_train: torch.Tensor  # [C]
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_test: torch.Tensor
    names: list[str] = field(init=False)
    shapes: list[torch.Size] = field(init=False)
    numels: list[int] = field(init=False)

    def __post_init__(self) -> None:
        params = dict(self.module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self._grad: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vmap(grad_and_value(self._loss))
        self._predict: Callable[..., torch.Tensor] = vmap(self._forward)
        if grouped.supports(self.module):  # CNNs: batched im2col convolutions beat vmap(conv2d) on CPU
            self._grad = self._grouped_grad
            self._predict = self._grouped_predict
        elif linear_shape(self.module) is not None:  # logistic / linear regression: batched matmuls
            self._grad = self._linear_grad
            self._predict = self._linear_forward

    @property
    def size(self) -> int:
        return len(self.clients)

    @property
    def dim(self) -> int:
        return sum(self.numels)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(flat, self.numels)
        return {n: p.view(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def _forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.unflatten(flat), (x,))

    def _linear_parts(self, thetas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n_in, n_out = linear_shape(self.module)  # type: ignore[misc]
        return thetas[:, : n_out * n_in].view(-1, n_out, n_in), thetas[:, n_out * n_in :]

    def _linear_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        w, b = self._linear_parts(thetas)
        return torch.baddbmm(b.unsqueeze(1), x.reshape(*x.shape[:2], -1), w.transpose(1, 2))

    def _linear_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form gradients of ``f_i`` for ``W x + b`` models, all clients in batched matmuls:
        ``dz = (softmax(z) - onehot(y)) / n`` (cross-entropy) or ``2 (z - y) / n`` (squared loss),
        ``grad W = dz^T X``, ``grad b = sum dz``, plus ``l2 theta``."""
        xs = x.reshape(*x.shape[:2], -1)
        z = self._linear_forward(thetas, x)  # [C, B, out]
        count = mask.sum(1)
        weight = (mask / count.clamp(min=1).unsqueeze(1)).unsqueeze(-1)
        if self.task == "classification":
            logp = torch.log_softmax(z, -1)
            per = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            dz = logp.exp().scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(per).unsqueeze(-1)) * weight
        else:
            diff = z.squeeze(-1) - y
            per = diff * diff
            dz = 2 * diff.unsqueeze(-1) * weight
        has = (count > 0).to(thetas.dtype)
        f = (per * mask).sum(1) / count.clamp(min=1) + has * 0.5 * self.l2 * (thetas * thetas).sum(1)
        g = torch.cat([torch.bmm(dz.transpose(1, 2), xs).flatten(1), dz.sum(1)], 1)
        return g + (has * self.l2).unsqueeze(1) * thetas, f

    def _grouped_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(thetas, self.numels, dim=1)
        params = {
            n: p.reshape(len(thetas), *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)
        }
        return grouped.forward(self.module, params, x)  # type: ignore[arg-type]

    def _grouped_predict(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs in groups of ``GROUP_CLIENTS`` clients: the im2col buffers of all clients at once
        would not fit for large evaluation chunks."""
        return torch.cat(
            [
                self._grouped_forward(thetas[k : k + GROUP_CLIENTS], x[k : k + GROUP_CLIENTS])
                for k in range(0, len(thetas), GROUP_CLIENTS)
            ]
        )

    def _grouped_losses(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum over clients of ``f_i`` (for one backward pass) and the per-client ``f_i``."""
        out = self._grouped_forward(thetas, x)
        per = self._per_sample(out.reshape(-1, *out.shape[2:]), y.reshape(-1)).view(mask.shape)
        count = mask.sum(1)
        f = (per * mask).sum(1) / count.clamp(min=1)
        f = f + (count > 0).to(thetas.dtype) * 0.5 * self.l2 * (thetas * thetas).sum(1)
        return f.sum(), f

    def _grouped_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients in groups of ``GROUP_CLIENTS`` clients, so that the im2col buffers stay small
        (larger groups were slower on a 2-core CPU; ``sheaf-fmtl bench`` times the group size in use)."""
        parts = [
            grad(self._grouped_losses, has_aux=True)(
                *(t[k : k + GROUP_CLIENTS] for t in (thetas, x, y, mask))
            )
            for k in range(0, len(thetas), GROUP_CLIENTS)
        ]
        return torch.cat([g for g, _ in parts]), torch.cat([f for _, f in parts])

    def _per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="none")
        return (out.squeeze(-1) - y) ** 2

    def _loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``f_i(theta) = mean_batch loss + l2/2 ||theta||^2``; a client without data has ``f_i = 0``."""
        count = mask.sum()
        data = (self._per_sample(self._forward(flat, x), y) * mask).sum() / count.clamp(min=1)
        return data + (count > 0).to(flat.dtype) * 0.5 * self.l2 * (flat * flat).sum()

    def sample(
        self, batch_size: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A mini-batch per client: ``min(batch_size, n_i)`` samples drawn without replacement.
        ``batch_size <= 0`` (or at least every client's size) gives the full local data."""
        n_max = self.x_train.shape[1]
        valid = torch.arange(n_max, device=self.n_train.device) < self.n_train[:, None]
        if batch_size <= 0 or batch_size >= n_max:
            return self.x_train, self.y_train, valid.to(self.x_train.dtype)
        keys = torch.rand((self.size, n_max), generator=gen).to(valid.device)
        keys = torch.where(valid, keys, torch.full_like(keys, 2.0))
        idx = keys.topk(batch_size, dim=1, largest=False, sorted=False).indices
        flat = (idx + n_max * torch.arange(self.size, device=idx.device)[:, None]).flatten()

        def rows(t: torch.Tensor) -> torch.Tensor:  # t[c, idx[c]]: index_select is ~3x faster than t[r, idx]
            return t.flatten(0, 1).index_select(0, flat).view(*idx.shape, *t.shape[2:])

        return rows(self.x_train), rows(self.y_train), rows(valid).to(self.x_train.dtype)

    def gradients(
        self, thetas: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f_i [C, d], f_i [C])`` on the batch, all clients batched (see the module docstring)."""
        return self._grad(thetas, *batch)

    def _chunked(self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, n: torch.Tensor, score: str):
        """Per-client sums over the valid samples of ``x`` of the loss or the test score, in sample
        chunks so that evaluating large datasets never holds every activation at once."""
        clients, n_max = x.shape[:2]
        valid = torch.arange(n_max, device=n.device) < n[:, None]
        total = thetas.new_zeros(clients)
        for s in range(0, n_max, EVAL_CHUNK):
            out = self._predict(thetas, x[:, s : s + EVAL_CHUNK])
            flat, yy = out.reshape(-1, *out.shape[2:]), y[:, s : s + EVAL_CHUNK].reshape(-1)
            if score == "loss":
                per = self._per_sample(flat, yy)
            elif self.task == "classification":
                per = (flat.argmax(-1) == yy).to(out.dtype)
            else:
                per = (flat.squeeze(-1) - yy) ** 2
            total += (per.view(clients, -1) * valid[:, s : s + EVAL_CHUNK]).sum(1)
        return total, n.to(total.dtype)

    def train_loss(self, thetas: torch.Tensor) -> torch.Tensor:
        """Full-batch ``f_i(theta_i)`` per client ``[C]``."""
        total, count = self._chunked(thetas, self.x_train, self.y_train, self.n_train, "loss")
        reg = (count > 0).to(thetas.dtype) * 0.5 * self.l2 * (thetas * thetas).sum(1)
        return total / count.clamp(min=1) + reg

    def test_metric(self, thetas: torch.Tensor) -> torch.Tensor:
        """Per client: test accuracy (classification) or test MSE (regression), ``[C]``."""
        total, count = self._chunked(thetas, self.x_test, self.y_test, self.n_test, "score")
        return total / count.clamp(min=1)

    def init_thetas(self, seed: int) -> torch.Tensor:
        """Each client's parameters from the module's default initialiser, seeded per client."""
        rows = []
        for client in self.clients.tolist():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(np.random.SeedSequence([seed, 7, client]).generate_state(1)[0]))
                for m in self.module.modules():
                    reset = getattr(m, "reset_parameters", None)
                    if callable(reset):
                        reset()
                rows.append(torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]))
        return torch.stack(rows).to(self.x_train.device)


@dataclass(eq=False)
class Federation:
    """All clients: cohorts plus where each client sits (``cohort_of``, ``position``)."""

    dataset: FederatedDataset
    cohorts: list[Cohort]
    cohort_of: np.ndarray
    position: np.ndarray

    @property
    def num_clients(self) -> int:
        return len(self.cohort_of)

    @property
    def task(self) -> str:
        return self.dataset.task

    def node_dims(self) -> np.ndarray:
        return np.array([self.cohorts[c].dim for c in self.cohort_of], dtype=np.int64)

    def per_client(self, per_cohort: list[torch.Tensor]) -> torch.Tensor:
        """Scatter per-cohort ``[C, ...]`` results back to client order ``[N, ...]``."""
        first = per_cohort[0]
        out = first.new_empty((self.num_clients, *first.shape[1:]))
        for cohort, values in zip(self.cohorts, per_cohort, strict=True):
            out[torch.as_tensor(cohort.clients)] = values
        return out


def build_federation(
    dataset: FederatedDataset, model: str = "auto", *, l2: float = 0.0, device: str | torch.device = "cpu"
) -> Federation:
    """Group clients by (model, input shape). ``model``: a name, ``auto`` (the paper's tabular
    default for the task), or a comma-separated list assigned round-robin (heterogeneous models)."""
    names = [default_model(dataset.task) if m.strip() == "auto" else m.strip() for m in model.split(",")]
    outputs = dataset.num_classes if dataset.task == "classification" else 1
    keys = [(names[i % len(names)], dataset.feature_shape(i)) for i in range(dataset.num_clients)]
    distinct = list(dict.fromkeys(keys))
    cohort_of = np.array([distinct.index(k) for k in keys], np.int64)
    position = np.zeros(len(keys), np.int64)
    dev = torch.device(device)
    ydtype = torch.long if dataset.task == "classification" else torch.float32
    cohorts = []
    for c, (name, shape) in enumerate(distinct):
        members = np.flatnonzero(cohort_of == c)
        position[members] = np.arange(len(members))
        splits = [dataset.clients[i] for i in members]
        x_tr, n_tr = _pad([s.x_train for s in splits], torch.float32, dev)
        y_tr, _ = _pad([s.y_train for s in splits], ydtype, dev)
        x_te, n_te = _pad([s.x_test for s in splits], torch.float32, dev)
        y_te, _ = _pad([s.y_test for s in splits], ydtype, dev)
        module = build_model(name, shape, outputs).to(dev)
        cohorts.append(Cohort(c, members, name, module, dataset.task, l2, x_tr, y_tr, n_tr, x_te, y_te, n_te))
    return Federation(dataset, cohorts, cohort_of, position)


def count_parameters(module: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in module.parameters())
