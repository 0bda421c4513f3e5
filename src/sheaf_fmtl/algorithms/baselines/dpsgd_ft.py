"""D-PSGD with fine-tuning (D-PSGD+FT): D-PSGD (:mod:`.dpsgd`, Lian et al. 2017) whose scored models
are each client's gossiped model fine-tuned on its own data, as FedAvg+FT does for FedAvg's global
model (:mod:`.fedavg_ft`; Cheng, Chadha and Duchi, "Fine-tuning is Fine in Federated Learning",
arXiv 2108.07313).

Round ``t``: D-PSGD's round, unchanged (``dpsgd_order``, ``local_epochs``, ``compressor``), which
moves the gossiped models ``x_i`` (Metropolis-Hastings mixing over the graph's neighbours); then
every client fine-tunes a copy of its ``x_i`` by ``finetune_epochs`` passes of plain mini-batch SGD
over its own training data, ``theta_i <- theta_i - alpha g_i(theta_i)`` (:mod:`.finetune`), from
streams of batches of their own. ``thetas``: the fine-tuned ``theta_i`` (what is evaluated, also at
round 0); ``models``: the ``x_i``, which the next round starts from and sends, so they are
D-PSGD's, round for round. Traffic: D-PSGD's (``d`` floats per half-edge and round, or a
compressor's messages); fine-tuning sends nothing. No coupling term. Missing neighbours and clients
that sit a round out: as D-PSGD; such a client also keeps its fine-tuned model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...config import RunConfig
from ...messages import Payload
from ..gossip.dpsgd import DPSGD, DPSGDKeys, mixing_flops
from ..gossip.payload import GossipState
from ..protocol.algorithm import Context, register
from .finetune import FinetuneKeys, FinetuneStreams, extended, finetune, finetune_streams


@dataclass
class TunedGossipState(GossipState):
    """:class:`.gossip.GossipState` with the gossiped models ``models [N, d]`` (``thetas``: their
    fine-tuned copies) and the number of fine-tunings so far (the next one's streams)."""

    models: torch.Tensor | None = None
    tuned: int = 0
    client_rows: ClassVar[tuple[str, ...]] = (*GossipState.client_rows, "models")


@register(
    "dpsgd-ft",
    display="D-PSGD+FT",
    reads=("compressor",),
    keys=(DPSGDKeys, FinetuneKeys),
    aggregation=mixing_flops,
)
class DPSGDFT(DPSGD):
    name = "dpsgd-ft"

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.streams: FinetuneStreams | None = None  # the fine-tuning's (set by init)

    def init(self, ctx: Context) -> GossipState:
        self.streams = finetune_streams(ctx)
        return self._tune(extended(super().init(ctx), TunedGossipState), ctx)

    def local(self, state: GossipState, ctx: Context) -> GossipState:
        assert isinstance(state, TunedGossipState) and state.models is not None
        state.thetas = [state.models]  # D-PSGD's round moves x_i; the scored models wait in _tune
        return super().local(state, ctx)

    def receive(self, state: GossipState, incoming: Payload, phase: int, ctx: Context) -> GossipState:
        return self._tune(super().receive(state, incoming, phase, ctx), ctx)

    def _tune(self, state: GossipState, ctx: Context) -> GossipState:
        """``models``: D-PSGD's ``x_i`` (in ``thetas`` after its round); ``thetas``: them fine-tuned
        (:func:`.finetune.finetune`)."""
        assert isinstance(state, TunedGossipState) and self.streams is not None
        state.models = state.thetas[0]
        state.thetas = finetune(ctx, state.thetas, self.streams, state.tuned)
        state.tuned += 1
        return state
