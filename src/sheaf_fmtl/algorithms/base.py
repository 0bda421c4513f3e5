"""The algorithm protocol and registry.

A round, in both runtimes: ``local`` (computation without communication) -> for each phase:
``send`` (payload per half-edge) -> ``transport.exchange`` -> ``receive``. Algorithms see other
clients only through what the transport hands them, and never touch files or build graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..runtime.transport import Payload

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..federation import Federation
    from ..sheaf.graph import ClientGraph


@dataclass
class State:
    """Stacked per-cohort parameters ``thetas[c]: [C, d_c]``; algorithms subclass to add fields."""

    thetas: list[torch.Tensor]
    batch_loss: torch.Tensor | None = None  # last mini-batch losses (divergence check)


@dataclass(eq=False)
class Context:
    """What an algorithm may use: the federation (its clients' data), the graph, hyper-parameters
    and two generators, one for initialisation and one for mini-batches (so algorithms that
    draw different initial state still see the same batches)."""

    fed: Federation
    graph: ClientGraph
    config: RunConfig
    init_gen: torch.Generator = field(default_factory=torch.Generator)
    batch_gen: torch.Generator = field(default_factory=torch.Generator)

    def stochastic_gradients(self, thetas: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Mini-batch gradients of the L2-regularised local losses, per cohort, and the batch losses
        ``[N]`` in client order."""
        grads, losses = [], []
        for cohort, theta in zip(self.fed.cohorts, thetas, strict=True):
            g, f = cohort.gradients(theta, cohort.sample(self.config.batch_size, self.batch_gen))
            grads.append(g)
            losses.append(f)
        return grads, self.fed.per_client(losses)

    def init_thetas(self) -> list[torch.Tensor]:
        return [c.init_thetas(self.config.seed) for c in self.fed.cohorts]


class Algorithm(Protocol):
    name: str

    def init(self, ctx: Context) -> State: ...

    def local(self, state: State, ctx: Context) -> State: ...

    def phases(self, state: State) -> int:
        """Number of exchanges in the coming round."""
        ...

    def send(self, state: State, phase: int, ctx: Context) -> Payload: ...

    def receive(self, state: State, incoming: Payload, phase: int, ctx: Context) -> State: ...

    def penalty(self, state: State, ctx: Context) -> tuple[float, float] | None:
        """``(coupling term of the objective, sheaf energy)`` or ``None`` when there is none."""
        ...

    def checkpoint(self, state: State, ctx: Context) -> dict[str, Any]: ...


# Factories are algorithm classes whose methods take their own State subclass, hence ``Any``.
AlgorithmFactory = Callable[["RunConfig"], Any]
ALGORITHMS: dict[str, AlgorithmFactory] = {}


def register(name: str) -> Callable[[AlgorithmFactory], AlgorithmFactory]:
    def deco(factory: AlgorithmFactory) -> AlgorithmFactory:
        ALGORITHMS[name] = factory
        return factory

    return deco


def make_algorithm(config: RunConfig) -> Algorithm:
    from . import load_all

    load_all()
    if config.algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {config.algorithm!r}; allowed: {', '.join(sorted(ALGORITHMS))}")
    algorithm: Algorithm = ALGORITHMS[config.algorithm](config)
    return algorithm


def sgd_step(thetas: list[torch.Tensor], grads: list[torch.Tensor], alpha: float) -> list[torch.Tensor]:
    return [t - alpha * g for t, g in zip(thetas, grads, strict=True)]
