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

from ..federation import Batch, EpochPlan
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
    draw different initial state still see the same batches).

    Mini-batches come from :meth:`next_batches`: with ``local_epochs = E > 0`` they walk through
    ``E`` passes over every client's own data per round (a fresh random order per pass; a client
    with ``n_i`` samples takes ``ceil(n_i / B)`` steps a pass, then sits out until the pass ends),
    otherwise each is a fresh random mini-batch. :meth:`local_steps` says how many steps a round's
    local phase takes."""

    fed: Federation
    graph: ClientGraph
    config: RunConfig
    init_gen: torch.Generator = field(default_factory=torch.Generator)
    batch_gen: torch.Generator = field(default_factory=torch.Generator)
    _plans: list[EpochPlan] = field(default_factory=list, repr=False)
    _cursor: int = 0

    @property
    def epoch_mode(self) -> bool:
        return self.config.local_epochs > 0

    def steps_per_epoch(self) -> int:
        """Steps of one pass over the largest client's data, over all cohorts."""
        return max(c.steps_per_epoch(self.config.batch_size) for c in self.fed.cohorts)

    def local_steps(self) -> int:
        """Local SGD steps per round: ``local_epochs`` passes over the largest client's data, or
        ``local_steps``."""
        if self.epoch_mode:
            return self.config.local_epochs * self.steps_per_epoch()
        return self.config.local_steps

    def next_batches(self) -> list[Batch | None]:
        """The next mini-batch of every cohort (``None``: the cohort sits this step out)."""
        b = self.config.batch_size
        if not self.epoch_mode:
            return [c.sample(b, self.batch_gen) for c in self.fed.cohorts]
        step = self._cursor % self.steps_per_epoch()
        if step == 0:
            self._plans = [c.epoch(b, self.batch_gen) for c in self.fed.cohorts]
        self._cursor += 1
        return [c.epoch_batch(plan, step, b) for c, plan in zip(self.fed.cohorts, self._plans, strict=True)]

    def gradients_on(
        self, thetas: list[torch.Tensor], batches: list[Batch | None]
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gradients of the L2-regularised local losses on given batches, per cohort (zero for a
        cohort without a batch), and the batch losses ``[N]`` in client order."""
        grads, losses = [], []
        for cohort, theta, batch in zip(self.fed.cohorts, thetas, batches, strict=True):
            if batch is None:
                g, f = torch.zeros_like(theta), theta.new_zeros(len(theta))
            else:
                g, f = cohort.gradients(theta, batch)
            grads.append(g)
            losses.append(f)
        return grads, self.fed.per_client(losses)

    def stochastic_gradients(self, thetas: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gradients on the next mini-batches (:meth:`next_batches`) and the batch losses ``[N]``."""
        return self.gradients_on(thetas, self.next_batches())

    def init_thetas(self) -> list[torch.Tensor]:
        """Initial models: one common model per architecture (``init = common``, the default, as
        the baselines' reference codes start) or one draw per client (``init = per-client``)."""
        common = self.config.init == "common"
        return [c.init_thetas(self.config.seed, common=common) for c in self.fed.cohorts]


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
