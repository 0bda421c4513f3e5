"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data" (2017), full participation.

Round ``t``: every client starts from the global model ``w^t``, runs ``local_steps`` local SGD steps (or
``local_epochs`` passes over its data)
``w_i <- w_i - alpha g_i(w_i)``, uplinks ``w_i``; the server sets ``w^{t+1} = sum_i n_i w_i / sum_i n_i``
(``n_i``: training sample counts) and downlinks it. Traffic per round: ``d`` floats up and ``d``
down per client. ``thetas``: the global model, one copy per client (evaluated on each client's data).
Missing clients (``drop_prob``, rejected rows): the server averages over the clients that reported;
a client that sits a round out keeps its models (:class:`.server.ServerAlgorithm`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch

from ..protocol.algorithm import Context, register
from ..training.epoch import local_epochs
from .server import ServerAlgorithm, ServerState, server_flops


@dataclass
class FedAvgState(ServerState):
    """FedAvg's: ``thetas`` is the global model, which follows the server under client sampling."""

    server_rows: ClassVar[tuple[str, ...]] = ("global_copies", "thetas")


@register("fedavg", display="FedAvg", aggregation=server_flops)
class FedAvg(ServerAlgorithm):
    name = "fedavg"

    def init(self, ctx: Context) -> ServerState:
        state = super().init(ctx)
        return FedAvgState(**{f.name: getattr(state, f.name) for f in fields(state)})

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        assert state.global_copies is not None
        state.global_copies = local_epochs(ctx, state, [state.global_copies], self.alpha)[0]
        state.thetas = [state.global_copies]
        return state

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        state.global_copies = avg
        state.thetas = [avg]
        return state
