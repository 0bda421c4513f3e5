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
round, client)`` (:func:`client_seeds`), so the shared model's iterates are those of the
algorithm without fine-tuning, number for number, and a client's batches do not depend on which
process holds it. Their gradients go through the cohorts' ``gradients`` like every local step's, so
``flops_local`` counts them (``metrics/flops.py``; the fine-tuning at initialisation comes before the
run counts, like the rest of start-up). Fine-tuning is plain SGD at ``alpha`` whatever
``optimizer`` and ``lr_schedule`` say (those drive the shared model's local steps).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TypeVar

import numpy as np
import torch

from ...component_keys import Keys, key
from ...streams import ClientStreams, id_hashes
from ..protocol.algorithm import Context, State

#: Stream kind of the fine-tuning batches (``sheaf_fmtl.streams``: 2-4, 7-8 and 11-12 are taken).
FINETUNE = 21

S = TypeVar("S", bound=State)


def client_seeds(seed: int, draw: int, clients: np.ndarray) -> np.ndarray:
    """63-bit seeds ``[C]``, one per client id, of fine-tuning number ``draw``: splitmix64 of the id
    under the key of stream ``(seed, FINETUNE, draw)`` (:func:`~sheaf_fmtl.streams.id_hashes`: one
    vectorised hash for every client, not a ``SeedSequence`` each, ~90 us a client a round)."""
    return id_hashes(seed, FINETUNE, draw, clients) >> np.uint64(1)


class FinetuneStreams(ClientStreams):
    """One CPU generator per client held here, reseeded for each fine-tuning from
    :func:`client_seeds` (``draw`` 0: at initialisation, ``k``: after round ``k``)."""

    def __init__(self, clients: list[int]) -> None:  # (no batch streams of its own: seeded per draw)
        self.seed = -1
        self.ids = np.asarray(clients, np.int64)
        self.gens = {c: torch.Generator() for c in clients}

    def reseed(self, seed: int, draw: int) -> FinetuneStreams:
        for gen, s in zip(self.gens.values(), client_seeds(seed, draw, self.ids).tolist(), strict=True):
            gen.manual_seed(s)
        return self


def finetune_streams(ctx: Context) -> FinetuneStreams:
    """The fine-tuning streams of the clients held here (reseeded by :func:`finetune` each time)."""
    return FinetuneStreams([int(c) for cohort in ctx.fed.cohorts for c in cohort.clients])


def finetune(
    ctx: Context, thetas: list[torch.Tensor], streams: FinetuneStreams, draw: int
) -> list[torch.Tensor]:
    """Copies of ``thetas`` (per cohort ``[C, d]``, left unchanged) after ``finetune_epochs`` passes of
    plain mini-batch SGD over each client's own training data (module docstring), the batches from
    ``streams`` reseeded for fine-tuning number ``draw``."""
    config = ctx.config
    streams.reseed(config.seed, draw)
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


@dataclass(frozen=True)
class FinetuneKeys(Keys):
    """The fine-tuning before scoring (``fedavg-ft``, ``dpsgd-ft``)."""

    finetune_epochs: int = key(
        1,
        "`fedavg-ft`, `dpsgd-ft`: passes of plain mini-batch SGD (step `alpha`, batch `batch_size`) over "
        "each client's own training data that turn the shared model into the model the client is scored "
        "with, after every round; the shared model goes on unchanged (fine-tuning never feeds back).",
        rule="finetune_epochs >= 1",
    )
