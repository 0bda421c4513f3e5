"""pFedMe: T. Dinh et al., "Personalized Federated Learning with Moreau Envelopes" (2020), Algorithm 1.

Objective: ``sum_i F_i(w)`` with the Moreau envelope ``F_i(w) = min_theta f_i(theta) + lam/2
||theta - w||^2``. Round ``t``, client ``i``, ``w_i`` starting at ``w^t`` and ``theta_i`` at ``w^t``:
for ``r < R`` (``local_steps``, or ``local_epochs`` passes): draw one mini-batch ``D``; the inner
solve takes ``inner_steps`` (``K``) gradient steps on it, warm-started from the previous ``theta_i``:
    ``theta_i <- theta_i - inner_lr (grad f_i(theta_i; D) + lam (theta_i - w_i))``;
then the outer local step ``w_i <- w_i - alpha lam (w_i - theta_i)``.
Server: ``w^{t+1} = (1 - pfedme_beta) w^t + pfedme_beta mean_i w_i`` (uniform mean over clients).
The transport averages the uplinked ``w_i``; each client, knowing ``w^t``, applies the beta-mixing
to the downlinked mean (the same numbers the server would broadcast). ``thetas``: the personalised
models ``theta_i`` of the last inner solve (what pFedMe evaluates); ``penalty``:
``lam/2 sum_i ||theta_i - w||^2`` with the current global ``w``.
Missing clients (``drop_prob``, rejected rows): the server averages over the clients that reported;
a client that sits a round out keeps its models (:class:`.server.ServerAlgorithm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...component_keys import Keys, key
from ...config import RunConfig
from ..protocol.algorithm import Context, register
from ..training.coupling import coupling_energy
from .server import ServerAlgorithm, ServerState, server_flops


@dataclass(frozen=True)
class PFedMeKeys(Keys):
    """pFedMe's inner solve and server mixing."""

    inner_steps: int = key(
        5, "pFedMe: gradient steps of the inner (Moreau envelope) solve.", rule="inner_steps >= 1"
    )
    inner_lr: float = key(0.05, "pFedMe: step size of the inner solve.", rule="inner_lr > 0")
    pfedme_beta: float = key(
        1.0,
        "pFedMe: server mixing `w <- (1 - beta) w + beta mean_i w_i`.",
        rule="pfedme_beta > 0",
    )


@register(
    "pfedme",
    display="pFedMe",
    step_keys=("inner_lr", "alpha", "lam", "pfedme_beta"),
    reads=("lam",),
    keys=(PFedMeKeys,),
    aggregation=server_flops,
)
class PFedMe(ServerAlgorithm):
    name = "pfedme"
    uniform = True

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.inner_steps = config.inner_steps
        self.inner_lr = config.inner_lr
        self.beta = config.pfedme_beta

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        assert state.anchor is not None
        w = theta = state.anchor
        for _ in range(ctx.local_steps()):
            batches = ctx.next_batches()
            for _ in range(self.inner_steps):
                grads, state.batch_loss = ctx.gradients_on([theta], batches)
                theta = theta - self.inner_lr * (grads[0] + self.lam * (theta - w))
            w = w - self.alpha * self.lam * (w - theta)
        state.thetas = [theta]
        state.global_copies = w
        return state

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        assert state.anchor is not None
        state.global_copies = (1.0 - self.beta) * state.anchor + self.beta * avg
        return state

    def penalty(self, state: ServerState, ctx: Context) -> tuple[float, float]:
        assert state.global_copies is not None
        return coupling_energy(state.thetas[0] - state.global_copies, self.lam, ctx.comm)
