"""Clients stacked by architecture (*cohorts*): their data end to end, flat thetas, batched local gradients.

A cohort's thetas are ``[C, d]``; its local losses ``f_i`` and their mini-batch gradients are
computed for all ``C`` clients at once, never client by client.

- :mod:`.ragged`: one split of a cohort's clients, stored end to end (no padding), gathered by position;
- :mod:`.stacked`: a cohort's data, its mini-batches (random and epoch-wise, :class:`Batch`,
  :class:`EpochPlan`) and the fixed evaluation subsample;
- :mod:`.cohort`: :class:`Cohort`, the batched losses, gradients, evaluation and initial models
  (:mod:`.evaluation`: the evaluation's sums, a block of clients at a time);
- :mod:`.build`: :class:`Cohorts` (all clients, or a shard) and :func:`build_federation`.
"""

from __future__ import annotations

from .build import Cohorts, build_federation, count_parameters
from .cohort import CUDA_PREDICT_GROUP, GROUP_CLIENTS, Cohort
from .evaluation import EVAL_CHUNK
from .stacked import EVAL_SUBSAMPLE_SEED, EVAL_TRAIN_SAMPLES, Batch, EpochPlan, StackedClients

__all__ = [
    "CUDA_PREDICT_GROUP",
    "EVAL_CHUNK",
    "EVAL_SUBSAMPLE_SEED",
    "EVAL_TRAIN_SAMPLES",
    "GROUP_CLIENTS",
    "Batch",
    "Cohort",
    "Cohorts",
    "EpochPlan",
    "StackedClients",
    "build_federation",
    "count_parameters",
]
