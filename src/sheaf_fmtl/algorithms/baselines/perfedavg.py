"""Per-FedAvg (first-order): Fallah et al., "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach" (2020), Algorithm 1 with the FO-MAML gradient.

Objective: ``mean_i f_i(w - alpha grad f_i(w))``. Round ``t``, client ``i``, ``w_i`` starting at
``w^t``, ``local_steps`` times, with two fresh mini-batches ``D``, ``D'``:
    ``u_i = w_i - alpha grad f_i(w_i; D)``,  ``w_i <- w_i - perfedavg_beta grad f_i(u_i; D')``
(first order: the Hessian term of the MAML gradient is dropped). Server: ``w^{t+1} = mean_i w_i``
(uniform, as in the paper).

Evaluation (our choice, stated here): ``thetas`` hold the personalised models, the global model
adapted by one local step on one fresh training mini-batch, ``theta_i = w - alpha grad f_i(w; D'')``
(``batch_size = 0``: the full local training set). They are recomputed after every round and at
initialisation; this costs one local gradient and no communication. No coupling term: ``penalty``
is ``None``.
Missing clients (``drop_prob``, rejected rows): the server averages over the clients that reported;
a client that sits a round out keeps its models (:class:`.server.ServerAlgorithm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...component_keys import Keys, key
from ...config import RunConfig
from ..protocol.algorithm import Context, register
from ..training.steps import gradient
from .server import ServerAlgorithm, ServerState, server_flops


@dataclass(frozen=True)
class PerFedAvgKeys(Keys):
    """Per-FedAvg's meta step."""

    perfedavg_beta: float = key(
        0.01,
        "Per-FedAvg: meta (outer) step size; `alpha` is the adaptation step.",
        rule="perfedavg_beta > 0",
    )


@register(
    "perfedavg",
    display="Per-FedAvg",
    step_keys=("alpha", "perfedavg_beta"),
    keys=(PerFedAvgKeys,),
    aggregation=server_flops,
)
class PerFedAvg(ServerAlgorithm):
    name = "perfedavg"
    uniform = True

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.beta = config.perfedavg_beta

    def init(self, ctx: Context) -> ServerState:
        return self._personalise(super().init(ctx), ctx)

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        assert state.anchor is not None
        w = state.anchor
        for _ in range(ctx.local_steps()):
            u = w - self.alpha * gradient(ctx, w, state)
            w = w - self.beta * gradient(ctx, u, state)
        state.global_copies = w
        return state

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        state.global_copies = avg
        return self._personalise(state, ctx)

    def _personalise(self, state: ServerState, ctx: Context) -> ServerState:
        assert state.global_copies is not None
        state.thetas = [state.global_copies - self.alpha * gradient(ctx, state.global_copies, state)]
        return state
