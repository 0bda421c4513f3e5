"""Local training: every client runs SGD on its own L2-regularised loss, no communication
(Sheaf-FMTL with ``lam = 0``, paper Remark 1): ``local_steps`` steps a round, or ``local_epochs``
passes over each client's data. A client that sits a round out (``drop_prob``) does not train that
round (the runtime puts its model back); there are no neighbours to miss."""

from __future__ import annotations

from ...config import RunConfig
from ...messages import Payload
from ..protocol.algorithm import Algorithm, Context, State, register
from ..training.epoch import local_epochs
from ..training.optim import local_step


@register("local", display="local training", color=6)
class Local(Algorithm[State]):
    name = "local"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha

    def init(self, ctx: Context) -> State:
        return State(thetas=ctx.init_thetas())

    def local(self, state: State, ctx: Context) -> State:
        if ctx.epoch_mode:
            state.thetas = local_epochs(ctx, state, state.thetas, self.alpha)
            return state
        for _ in range(ctx.local_steps()):
            grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
            state.thetas = local_step(ctx, state, state.thetas, grads, self.alpha)
        return state

    def phases(self, state: State) -> int:
        return 0

    def send(self, state: State, phase: int, ctx: Context) -> Payload:
        raise RuntimeError("local training sends nothing")

    def receive(self, state: State, incoming: Payload, phase: int, ctx: Context) -> State:
        raise RuntimeError("local training receives nothing")
