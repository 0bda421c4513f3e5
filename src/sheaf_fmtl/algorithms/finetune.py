"""Fine-tuning before scoring (``fedavg-ft``, ``dpsgd-ft``): the shared model, refined on each
client's own training data into the model that client is evaluated with.

Wang et al., "Federated Evaluation of On-device Personalization" (2019), and Cheng, Chadha and
Duchi, "Fine-tuning is Fine in Federated Learning" (arXiv 2108.07313, 2021): personalise a federated
model by a few epochs of local training from it. Here, after every round (and at initialisation),
``finetune_epochs`` passes of plain mini-batch SGD, ``theta_i <- theta_i - alpha g_i(theta_i)`` with
``g_i`` the gradient of client ``i``'s L2-regularised loss on a mini-batch of ``batch_size`` (0: all)
of its own training samples, each pass a fresh random order of them (as ``local_epochs`` walks them).

The fine-tuned copies are what ``thetas`` holds, so what the run evaluates and saves; the shared
model never sees them. Their batches come from streams of their own, derived from ``(seed,
round, client)`` (:func:`finetune_streams`), so the shared model's iterates are those of the
algorithm without fine-tuning, number for number, and a client's batches do not depend on which
process holds it. Their gradients go through the cohorts' ``gradients`` like every local step's, so
``flops_local`` counts them (``metrics/flops.py``; the fine-tuning at initialisation comes before the
run counts, like the rest of start-up). Fine-tuning is plain SGD at ``alpha`` whatever
``optimizer`` and ``lr_schedule`` say (those drive the shared model's local steps).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

import torch

from ..streams import ClientStreams, stream_seed
from .base import Context, State

#: Stream kind of the fine-tuning batches (``sheaf_fmtl.streams``: 2-4, 7-8 and 11-12 are taken).
FINETUNE = 21

S = TypeVar("S", bound=State)


def finetune_streams(ctx: Context, draw: int) -> ClientStreams:
    """One stream per client held here for fine-tuning number ``draw`` (0: at initialisation, ``k``:
    after round ``k``), seeded from ``(seed, draw)`` and the client's id."""
    seed = stream_seed(ctx.config.seed, FINETUNE, draw)
    return ClientStreams(seed, [int(c) for cohort in ctx.fed.cohorts for c in cohort.clients])


def finetune(ctx: Context, thetas: list[torch.Tensor], draw: int) -> list[torch.Tensor]:
    """Copies of ``thetas`` (per cohort ``[C, d]``, left unchanged) after ``finetune_epochs`` passes of
    plain mini-batch SGD over each client's own training data (module docstring); ``draw`` picks the
    batches' streams (:func:`finetune_streams`)."""
    config = ctx.config
    streams = finetune_streams(ctx, draw)
    out = []
    for cohort, theta in zip(ctx.fed.cohorts, thetas, strict=True):
        for _ in range(config.finetune_epochs):
            plan = cohort.epoch(config.batch_size, streams)
            for step in range(plan.steps):
                batch = cohort.epoch_batch(plan, step, config.batch_size)
                if batch is None:  # pragma: no cover - every step of a plan has a client
                    continue
                noise = cohort.draw_noise(batch, streams)  # dropout's masks, from the same streams
                args = (theta, batch) if noise is None else (theta, batch, noise)
                g, _ = cohort.gradients(*args)
                theta = theta - config.alpha * g
        out.append(theta)
    return out


def extended(state: State, cls: type[S]) -> S:
    """``state``'s fields in an instance of its subclass ``cls`` (the subclass's own fields at their
    defaults)."""
    return cls(**{f.name: getattr(state, f.name) for f in fields(state) if f.init})
