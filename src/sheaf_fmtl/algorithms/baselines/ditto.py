"""Ditto: Li et al., "Ditto: Fair and Robust Federated Learning Through Personalization" (2021).

Round ``t``, client ``i``, from the global model ``w^t`` (``local_steps`` steps of each, fresh
mini-batches):
- global part (FedAvg's local solver): ``w_i <- w_i - alpha g_i(w_i)``, ``w_i`` starting at ``w^t``;
- personal part (eq. 2, prox term ``lam/2 ||v_i - w^t||^2``):
  ``v_i <- v_i - alpha (g_i(v_i) + lam (v_i - w^t))``.
The server sets ``w^{t+1} = sum_i n_i w_i / sum_i n_i``. ``thetas``: the personal models ``v_i``
(what is evaluated); ``penalty``: ``lam/2 sum_i ||v_i - w||^2`` with the current global ``w``.
Missing clients (``drop_prob``, rejected rows): the server averages over the clients that reported;
a client that sits a round out keeps its models (:class:`.server.ServerAlgorithm`).
"""

from __future__ import annotations

from ..protocol.algorithm import Context, register
from ..training.coupling import coupling_energy
from ..training.steps import gradient, sgd_steps
from .server import ServerAlgorithm, ServerState, server_flops


@register("ditto", display="Ditto", step_keys=("alpha", "lam"), reads=("lam",), aggregation=server_flops)
class Ditto(ServerAlgorithm):
    name = "ditto"

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        w0 = state.anchor
        assert w0 is not None
        state.global_copies = sgd_steps(ctx, state, w0, ctx.local_steps(), self.alpha)
        v = state.thetas[0]
        for _ in range(ctx.local_steps()):
            v = v - self.alpha * (gradient(ctx, v, state) + self.lam * (v - w0))
        state.thetas = [v]
        return state

    def penalty(self, state: ServerState, ctx: Context) -> tuple[float, float]:
        assert state.global_copies is not None
        return coupling_energy(state.thetas[0] - state.global_copies, self.lam, ctx.comm)
