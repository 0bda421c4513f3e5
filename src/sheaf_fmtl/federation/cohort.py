"""Batched local losses ``f_i`` of a cohort (L2-regularised cross-entropy or squared loss, paper
Section 5 "Evaluation"), their mini-batch gradients, evaluation and initial models.

The gradients of all ``C`` clients are computed at once, never client by client: closed-form
batched matmuls for logistic / linear regression (:mod:`sheaf_fmtl.models.linear`), for CNNs one
hand-written forward and backward with the clients as the groups of grouped convolutions
(:mod:`sheaf_fmtl.models.fused`; ``cnn_kernel = "im2col"``: im2col convolutions batched over
clients, :mod:`sheaf_fmtl.models.grouped`, with one ``torch.func.grad`` per group of clients, also
the path of a user loss), and ``torch.func`` (``vmap`` + ``functional_call`` + ``grad``) for any
other model.

Why one module over 300 lines: the gradient paths (closed form, fused CNN, im2col, ``vmap``, dropout
masks) and the evaluation share one cohort's stacked data and parameter layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

from ..models import grouped
from ..models.batchnorm import client_norms
from ..models.fused import FusedCNN, exact_cudnn
from ..models.linear import linear_forward, linear_gradients, linear_shape
from ..models.user import dropout_input_shapes, dropout_layers
from ..streams import ClientStreams, fill_keys
from . import evaluation
from .evaluation import chunked_sums
from .initial import draw_initial
from .norms import CohortNorms
from .ragged import Ragged
from .stacked import Batch, StackedClients

GROUP_CLIENTS = 4  # clients per batched im2col CNN call on CPU (see Cohort._grouped_grad); all on CUDA
# CNN gradients per device: "fused" (grouped convolutions, hand-written backward: about 35 aten ops a
# step on CPU, as fast as im2col there) or "im2col" (bmm convolutions, torch.func.grad); on CUDA too
# fused: a side-by-side R-MNIST-shaped round on an H200 (benchmarks/gpu-round.sh) took 119 ms with it
# and 202 ms with im2col.
CNN_KERNEL = {"cpu": "fused", "cuda": "fused"}
CUDA_PREDICT_GROUP = 8  # clients per batched CNN prediction on CUDA (im2col of EVAL_CHUNK samples each)
INIT_STREAM = {False: 7, True: 8}  # seed stream of initial models: per client, common (init = common)


@dataclass(eq=False)
class Cohort(StackedClients):
    """Clients that share one architecture (same model name and input shape, so the same ``d``)."""

    names: list[str] = field(init=False)
    shapes: list[torch.Size] = field(init=False)
    numels: list[int] = field(init=False)
    group: int = field(init=False)  # clients per batched CNN call
    cnn_kernel: str = field(init=False)  # "fused" or "im2col" (CNN_KERNEL); settable, e.g. by a benchmark
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = field(init=False, default=None)
    metric_fn: Callable[[torch.Tensor, torch.Tensor], float] | None = field(init=False, default=None)
    factory: Callable[[int], nn.Module] | None = field(init=False, default=None)  # a user model's builder
    dropout: list[str] = field(init=False)  # the module's SeededDropout layers (models/user.py)
    norms: CohortNorms | None = field(init=False, default=None)  # per-client BatchNorm statistics
    _noise_shapes: dict[str, tuple[int, ...]] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.group = self.size if self.device.type == "cuda" else GROUP_CLIENTS
        params = dict(self.module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.numels = [p.numel() for p in params.values()]
        self._grad: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vmap(grad_and_value(self._loss))
        self._predict: Callable[..., torch.Tensor] = vmap(self._forward)
        self._linear_io = linear_shape(self.module)
        self.dropout = dropout_layers(self.module)
        self._noisy_grad: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vmap(
            grad_and_value(self._noisy_loss)
        )
        self._fused: FusedCNN | None = None
        self.cnn_kernel = CNN_KERNEL.get(self.device.type, "im2col")
        layers = client_norms(self.module)
        if layers:  # BatchNorm: each client's statistics beside its parameters (federation/norms.py)
            self.norms = CohortNorms(self, layers)
            self._predict = self.norms.outputs
            with contextlib.suppress(ValueError):  # BatchNorm2d between convolutions: fused kernel
                self._fused = FusedCNN(self.module, self.task)  # type: ignore[arg-type]
        elif grouped.supports(self.module):  # CNNs: batched im2col convolutions beat vmap(conv2d) on CPU
            self._grad = self._cnn_grad
            self._predict = self._grouped_predict
            try:
                self._fused = FusedCNN(self.module, self.task)  # type: ignore[arg-type]
            except ValueError:  # a layer order it does not know: im2col only
                self.cnn_kernel = "im2col"
        elif self._linear_io is not None:  # logistic / linear regression: closed form, batched matmuls
            self._grad = self._linear_grad
            self._predict = self._linear_forward

    @property
    def lazy_inputs(self) -> bool:
        """Whether the gradients read lazy batches: the closed-form linear path is the one in use
        (no BatchNorm, dropout or user loss), which gathers its inputs a block of clients at a time."""
        return self._grad == self._linear_grad and self.norms is None and not self.dropout

    def use_objective(
        self,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None,
        metric: Callable[[torch.Tensor, torch.Tensor], float] | None,
    ) -> None:
        """A user loss (per-sample values ``[B]``) and metric (one client's test outputs -> float) in
        place of the task's; ``None`` keeps the task's. The closed-form gradients know only the
        task's losses: with a user loss a linear model takes ``torch.func`` gradients."""
        self.loss_fn, self.metric_fn = loss, metric
        if loss is not None and self._linear_io is not None and not grouped.supports(self.module):
            self._grad = vmap(grad_and_value(self._loss))

    def with_train(self, train: Ragged) -> Cohort:
        """The same cohort (model, objective, user factory, architecture's first client, kernel) on other
        training samples. ``dataclasses.replace`` alone resets the fields set after construction: the
        initial models of ``init = common`` would then come from the first client held here, which
        differs between process layouts."""
        out = dataclasses.replace(self, train=train)
        out.use_objective(self.loss_fn, self.metric_fn)
        out.factory, out.first_client, out.cnn_kernel = self.factory, self.first_client, self.cnn_kernel
        return out

    @property
    def dim(self) -> int:
        return sum(self.numels)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(flat, self.numels)
        return {n: p.view(s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)}

    def _forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return cast("torch.Tensor", functional_call(self.module, self.unflatten(flat), (x,)))

    def _linear_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        assert self._linear_io is not None
        return linear_forward(thetas, x, self._linear_io)

    def _linear_grad(
        self,
        thetas: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        source: Ragged | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form gradients of ``f_i`` (:func:`sheaf_fmtl.models.linear.linear_gradients`), a
        block of clients at a time (:meth:`eval_block`'s budget): the temporaries stay bounded.
        ``source``: ``x`` is the inputs' stored rows ``[C, B]`` there, gathered block by block."""
        assert self._linear_io is not None
        io, task, l2 = self._linear_io, self.task, self.l2
        block = self.eval_block(int(x.shape[1]), extra=int(thetas.shape[1]))

        def inputs(part: slice) -> torch.Tensor:
            if source is None:
                return x[part]
            rows = x[part]
            return source.x.index_select(0, rows.reshape(-1)).view(*rows.shape, *source.feature_shape)

        if len(thetas) <= block:
            return linear_gradients(thetas, inputs(slice(None)), y, mask, io, task, l2)
        g, f = torch.empty_like(thetas), thetas.new_empty(len(thetas))
        for lo in range(0, len(thetas), block):
            part = slice(lo, lo + block)
            g[part], f[part] = linear_gradients(thetas[part], inputs(part), y[part], mask[part], io, task, l2)
        return g, f

    def _grouped_forward(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(thetas, self.numels, dim=1)
        params = {
            n: p.reshape(len(thetas), *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)
        }
        return grouped.forward(self.module, params, x)  # type: ignore[arg-type]

    def _grouped_predict(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs in groups of ``self.group`` clients: on CPU the im2col buffers of all clients at
        once would not fit for large evaluation chunks."""
        g = self.predict_group(x)
        return torch.cat(
            [self._grouped_forward(thetas[k : k + g], x[k : k + g]) for k in range(0, len(thetas), g)]
        )

    def predict_group(self, x: torch.Tensor) -> int:
        """Clients per batched CNN prediction on ``x``'s device."""
        return min(self.group, CUDA_PREDICT_GROUP) if x.is_cuda else self.group

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

    def _fused_now(self) -> bool:
        """Whether CNN gradients take :class:`FusedCNN` (``cnn_kernel = "fused"``, the task's loss)."""
        return self._fused is not None and self.cnn_kernel == "fused" and self.loss_fn is None

    def _fused_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
        active: torch.Tensor | None, stats: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """:meth:`FusedCNN.loss_and_grad` (``stats``: BatchNorm's, replaced by those after the batch);
        on CUDA with cuDNN's TF32 off (float32, like ``bmm``)."""
        assert self._fused is not None
        with exact_cudnn(x):
            return self._fused.loss_and_grad(thetas, x, y, mask, self.l2, active, stats)

    def _cnn_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_fused_grad` when it applies, else :meth:`_grouped_grad`."""
        if self._fused_now():
            return self._fused_grad(thetas, x, y, mask, None)
        return self._grouped_grad(thetas, x, y, mask)

    def _grouped_grad(
        self, thetas: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients in groups of ``self.group`` clients, so that on CPU the im2col buffers stay small
        (larger groups were slower on a 2-core CPU; ``sheaf-fmtl bench`` times the group size in use);
        on CUDA one call takes every client."""
        g = self.group
        parts = [
            grad(self._grouped_losses, has_aux=True)(*(t[k : k + g] for t in (thetas, x, y, mask)))
            for k in range(0, len(thetas), g)
        ]
        return torch.cat([g for g, _ in parts]), torch.cat([f for _, f in parts])

    def _per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.loss_fn is not None:
            return self.loss_fn(out, y)
        if self.task == "classification":  # cross_entropy(reduction="none"), ~3x its speed on the CPU
            return torch.logsumexp(out, -1) - out.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        return (out.squeeze(-1) - y) ** 2

    def _loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``f_i(theta) = mean_batch loss + l2/2 ||theta||^2``; a client without data has ``f_i = 0``."""
        count = mask.sum()
        data = (self._per_sample(self._forward(flat, x), y) * mask).sum() / count.clamp(min=1)
        return data + (count > 0).to(flat.dtype) * 0.5 * self.l2 * (flat * flat).sum()

    def _noisy_loss(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
        noise: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """:meth:`_loss` with dropout: ``noise`` holds each dropout layer's uniform numbers."""
        count = mask.sum()
        given = {**self.unflatten(flat), **{f"{n}.noise": v for n, v in noise.items()}}
        out = functional_call(self.module, given, (x,))
        data = (self._per_sample(out, y) * mask).sum() / count.clamp(min=1)
        return data + (count > 0).to(flat.dtype) * 0.5 * self.l2 * (flat * flat).sum()

    def draw_noise(
        self, batch: Batch | None, source: ClientStreams | torch.Generator
    ) -> dict[str, torch.Tensor] | None:
        """Uniform numbers for every dropout layer of the module (``None`` without one), ``[C', B,
        *layer input]`` for the batch's clients, each client's from its own stream (after its batch
        keys): the same masks in whichever process holds the client, and in a resumed run."""
        if not self.dropout or batch is None:
            return None
        if self._noise_shapes is None:  # each layer's input shape per sample, from one sample
            self._noise_shapes = dropout_input_shapes(self.module, self.train.x[:1], self.dropout)
        rows = (
            self._client_ids if batch.active is None else [self._client_ids[k] for k in batch.active.tolist()]
        )
        out = {}
        for name in self.dropout:
            buf = torch.empty(len(rows), batch.x.shape[1], *self._noise_shapes[name])
            fill_keys(source, rows, [b.view(-1) for b in buf])
            out[name] = buf.to(self.device)
        return out

    def gradients(
        self,
        thetas: torch.Tensor,
        batch: Batch | tuple[torch.Tensor, ...],
        noise: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(grad f_i [C, d], f_i [C])`` on the batch, all clients batched (see the module docstring);
        with ``noise`` (:meth:`draw_noise`), in train mode: dropout masks drawn from it. Clients left out
        of an ``active`` batch get a zero gradient and ``f_i = 0``."""
        source: Ragged | None = None
        if isinstance(batch, Batch):
            x, y, mask, active, source = batch
        else:
            x, y, mask, *rest = batch
            active = rest[0] if rest else None
        if self.norms is not None:  # BatchNorm: each client's statistics updated by its batch
            return self.norms.gradients(thetas, x, y, mask, active, noise)
        if noise is None and self._fused_now():  # takes the active clients' rows itself
            return self._fused_grad(thetas, x, y, mask, active)
        grad: Callable[..., tuple[torch.Tensor, torch.Tensor]] = self._grad
        if source is not None:  # a lazy batch: only where lazy_inputs (the closed form, the task's loss)
            grad = functools.partial(self._linear_grad, source=source)
        elif noise is not None:  # the masks vmapped with the rows: passed by position

            def noisy(*a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return self._noisy_grad(*a, noise)

            grad = noisy
        if active is None:
            return grad(thetas, x, y, mask)
        g, f = grad(thetas.index_select(0, active), x, y, mask)
        return (
            torch.zeros_like(thetas).index_copy_(0, active, g),
            thetas.new_zeros(len(thetas)).index_copy_(0, active, f),
        )

    def eval_block(self, width: int, extra: int = 0) -> int:
        """Clients per chunk of ``width`` samples each, plus ``extra`` elements a client (its
        gradient), within :data:`.evaluation.EVAL_ELEMENTS` (16x that on CUDA, where larger launches pay)."""
        budget = evaluation.EVAL_ELEMENTS * (16 if self.device.type == "cuda" else 1)
        return max(1, budget // max(1, width * math.prod(self.feature_shape) + extra))

    def predict_rows(self, thetas: torch.Tensor, x: torch.Tensor, rows: slice) -> torch.Tensor:
        """Outputs of the cohort's clients at positions ``rows`` (their parameters ``thetas``, their
        BatchNorm statistics) on ``x [len(rows), B, ...]``."""
        if self.norms is not None:
            return self.norms.outputs(thetas, x, rows)
        return self._predict(thetas, x)

    def train_loss(self, thetas: torch.Tensor, full: bool = False) -> torch.Tensor:
        """``f_i(theta_i)`` per client ``[C]``, on a fixed random subsample of ``EVAL_TRAIN_SAMPLES``
        training samples per client (the reported estimate; ``full=True``: all training data)."""
        idx = None if full else self._eval_subsample()[0]
        total, count = chunked_sums(self, thetas, self.train, "loss", idx)
        reg = (count > 0).to(thetas.dtype) * 0.5 * self.l2 * (thetas * thetas).sum(1)
        return cast("torch.Tensor", total / count.clamp(min=1) + reg)

    def test_metric(self, thetas: torch.Tensor) -> torch.Tensor:
        """Per client: test accuracy (classification) or test MSE (regression), ``[C]``; with a user
        metric, its value on the client's whole test set."""
        if self.metric_fn is not None:  # a block of clients at a time, each client's test set whole
            sizes, width, values = self.test.n_host.tolist(), self.test.n_max, []
            block = self.eval_block(width)
            for c in range(0, self.size, block):
                rows = slice(c, min(c + block, self.size))
                at = torch.arange(rows.start, rows.stop, device=self.device)
                xs, ys = self.test.gather(torch.arange(width, device=self.device).expand(len(at), -1), at)
                out = self.predict_rows(thetas[rows], xs, rows)
                values += [
                    self.metric_fn(out[k, :n], ys[k, :n]) if n else 0.0 for k, n in enumerate(sizes[rows])
                ]
            return thetas.new_tensor(values)
        total, count = chunked_sums(self, thetas, self.test, "score")
        return cast("torch.Tensor", total / count.clamp(min=1))

    def init_thetas(self, seed: int, common: bool = False) -> torch.Tensor:
        """Parameters from the module's default initialiser: one draw per client, seeded per client,
        or (``common``) one draw seeded by the architecture's first client (``first_client``; the
        cohort's first when unset), shared by every client."""
        if self.norms is not None:  # a run's start: every client's statistics afresh
            self.norms.reset()
        if common:
            lead = self.first_client if self.first_client >= 0 else int(self.clients[0])
            first = self.init_thetas_for([lead], seed, stream=INIT_STREAM[True])
            return first.expand(self.size, -1).clone()
        return self.init_thetas_for(self.clients.tolist(), seed, stream=INIT_STREAM[False])

    def init_thetas_for(self, clients: list[int], seed: int, stream: int) -> torch.Tensor:
        """Drawn on a CPU copy of the module, so every device starts from the same models."""
        rows = draw_initial(self.module, self.factory, clients, seed, stream)
        if rows.shape[1] != self.dim:
            raise ValueError(
                f"model of client {clients[0]}: {rows.shape[1]} parameters, {self.dim} when the federation "
                "was built; the model factory must build the same architecture each time"
            )
        return rows.to(self.device)
