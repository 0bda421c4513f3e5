"""FedAvg with fine-tuning (FedAvg+FT): FedAvg (:mod:`.fedavg`, McMahan et al. 2017) whose scored
models are the global model fine-tuned on each client's own data (Wang et al. 2019, "Federated
Evaluation of On-device Personalization"; Cheng, Chadha and Duchi, "Fine-tuning is Fine in Federated
Learning", arXiv 2108.07313).

Round ``t``: FedAvg's round, unchanged (``w^{t+1} = sum_i n_i w_i / sum_i n_i`` after the local
steps from ``w^t``); then every client fine-tunes a copy of ``w^{t+1}`` by ``finetune_epochs`` passes
of plain mini-batch SGD over its own training data, ``theta_i <- theta_i - alpha g_i(theta_i)``
(:mod:`.finetune`), from streams of batches of their own. ``thetas``: the fine-tuned ``theta_i`` (what
is evaluated, also at round 0: the initial global model fine-tuned); ``global_copies``: ``w``, which
the next round starts from, so the global model is FedAvg's, round for round. Traffic: FedAvg's
(``d`` floats up and ``d`` down per client and round); fine-tuning sends nothing. No coupling term.
Missing clients (``drop_prob``, rejected rows): as FedAvg; a client that sits a round out keeps its
global copy and its fine-tuned model as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config import RunConfig
from ..protocol.algorithm import Context, register
from .fedavg import FedAvg
from .finetune import FinetuneKeys, FinetuneStreams, extended, finetune, finetune_streams
from .server import ServerState, server_flops


@dataclass
class TunedServerState(ServerState):
    """:class:`.server.ServerState` and the number of fine-tunings so far (the next one's streams)."""

    tuned: int = 0


@register("fedavg-ft", display="FedAvg+FT", keys=(FinetuneKeys,), aggregation=server_flops)
class FedAvgFT(FedAvg):
    name = "fedavg-ft"

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.streams: FinetuneStreams | None = None  # the fine-tuning's (set by init)

    def init(self, ctx: Context) -> ServerState:
        self.streams = finetune_streams(ctx)
        return self._tune(extended(super().init(ctx), TunedServerState), ctx)

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        scored = state.thetas  # FedAvg's local steps move the global copies; the scored models wait
        state = super().local_update(state, ctx)
        state.thetas = scored
        return state

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        state.global_copies = avg
        return self._tune(state, ctx)

    def _tune(self, state: ServerState, ctx: Context) -> ServerState:
        """``thetas``: the global copies fine-tuned (:func:`.finetune.finetune`)."""
        assert isinstance(state, TunedServerState) and state.global_copies is not None
        assert self.streams is not None
        state.thetas = finetune(ctx, [state.global_copies], self.streams, state.tuned)
        state.tuned += 1
        return state
