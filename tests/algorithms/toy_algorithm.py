"""A new algorithm in one file, as a user writes one: its keys declared beside it, registered with
``@register``, run with ``--set algorithm=tests.algorithms.toy_algorithm:ToyShrink``. Local SGD whose
models shrink towards zero by ``toy_shrink`` after each round (0: local training exactly)."""

from __future__ import annotations

from dataclasses import dataclass

from sheaf_fmtl.algorithms import Algorithm, Context, State, register
from sheaf_fmtl.algorithms.training.optim import local_step
from sheaf_fmtl.component_keys import Keys, key
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.messages import Payload


@dataclass(frozen=True)
class ToyKeys(Keys):
    """The toy's own key."""

    toy_shrink: float = key(
        0.0, "Toy: the fraction each model shrinks by after a round.", rule="0 <= toy_shrink <= 1"
    )


@register("toy-shrink", display="toy", keys=(ToyKeys,))
class ToyShrink(Algorithm[State]):
    name = "toy-shrink"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.keep = 1.0 - config.of(ToyKeys).toy_shrink

    def init(self, ctx: Context) -> State:
        return State(thetas=ctx.init_thetas())

    def local(self, state: State, ctx: Context) -> State:
        for _ in range(ctx.local_steps()):
            grads, state.batch_loss = ctx.stochastic_gradients(state.thetas)
            state.thetas = local_step(ctx, state, state.thetas, grads, self.alpha)
        if self.keep != 1.0:
            state.thetas = [theta * self.keep for theta in state.thetas]
        return state

    def phases(self, state: State) -> int:
        return 0

    def send(self, state: State, phase: int, ctx: Context) -> Payload:
        raise RuntimeError("the toy sends nothing")

    def receive(self, state: State, incoming: Payload, phase: int, ctx: Context) -> State:
        raise RuntimeError("the toy receives nothing")
