"""Code run by the round loop (:mod:`..loop`): after every round (``on_round_end``) and at the end
(``on_run_end``). A callback that returns a :class:`Stop` from ``on_round_end`` ends the run after
that round with a resumable checkpoint (``summary.json``: ``status = stopped``, ``stopped_by``);
``--resume`` / ``resume=`` continues it to the end, to the uninterrupted run's numbers.

The callbacks the library ships (loggers, early stopping, the best evaluation's models) and those
the config keys ask for: :mod:`.shipped_callbacks`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from ....config import RunConfig
from ....metrics.results import metric_column, split_of
from ....models.batchnorm import set_buffers
from ....plugins import higher_is_better
from ...engine.transport import InProcessTransport
from ..checkpoints.gather import gather_models

if TYPE_CHECKING:
    from ...engine.simulate import Simulation


@dataclass(frozen=True)
class Stop:
    """What ``on_round_end`` returns to end the run after this round (``reason``: for the summary)."""

    reason: str = ""


@runtime_checkable
class Callback(Protocol):
    """Both methods are optional: an object with either one is a callback.

    ``on_round_end(round, metrics, view)``: after every round (and for round 0, the initial
    models, in a run that is not resumed); ``metrics`` is the round's row of ``metrics.csv``
    (``round``, ``test_accuracy`` or ``test_mse``, ``train_loss``, ...; ``val_accuracy`` or
    ``val_mse`` in a run that scores a validation split, ``validation > 0``) when the round was
    evaluated, else ``None``; ``view`` reads the clients' models (:class:`RunView`). Return a
    :class:`Stop` (or ``True``, also a NumPy or one-element torch boolean) to end the run after this
    round (from round 1 on); ``None`` or ``False`` goes on; anything else is refused.
    ``on_run_end(summary)``: once, with what ``summary.json`` holds (not for a diverged run).
    ``on_exception(error)`` (optional too): once, when the run ends with an error instead (a diverged
    run's :class:`~sheaf_fmtl.runtime.engine.simulate.DivergenceError`, a full disk, ...), before it
    is raised.
    """

    def on_round_end(
        self, round: int, metrics: dict[str, Any] | None, view: RunView
    ) -> Stop | bool | None: ...

    def on_run_end(self, summary: dict[str, Any]) -> None: ...


class RunView:
    """Read-only access to a running federation: its config, run folder, metric and each
    client's current model (copies: changing them changes nothing in the run)."""

    def __init__(self, sim: Simulation[Any], out: Path | None, rank: int = 0) -> None:
        self._sim = sim
        self.config: RunConfig = sim.config
        self.out = out  #: the run folder (``None``: a run in memory, or a rank that does not write it)
        self.rank = rank  #: this process's rank (0 in one process): loggers write on rank 0 only
        fed = sim.ctx.fed
        self.num_clients: int = fed.num_clients
        self.metric: str = fed.metric_name  #: ``accuracy``, ``mse`` or the user metric's name
        #: its key in the rows: ``test_accuracy``, or ``val_accuracy`` when a validation split is scored
        self.metric_column = metric_column(self.metric, split_of(sim.config.validation))
        self.higher_is_better: bool | None = higher_is_better(
            sim.config.metric_goal, sim.config.metric, self.metric
        )
        #: the run's final state once it has ended (``checkpoint.pt``'s payload: ``thetas``, ``edges``,
        #: ``map_norms``, ``edge_weight_history``, ...; on rank 0 in a run of several processes), for
        #: ``on_run_end``; ``None`` before
        self.final_state: dict[str, Any] | None = None

    def clients(self) -> list[int]:
        """The clients this process holds (all of them in one process)."""
        cohort_of = self._sim.ctx.fed.cohort_of
        return [i for i in range(self.num_clients) if int(cohort_of[i]) >= 0]

    def theta(self, i: int) -> torch.Tensor:
        """Client ``i``'s flat parameter vector ``theta_i`` (a copy on the CPU)."""
        if int(self._sim.ctx.fed.cohort_of[i]) < 0:
            raise ValueError(f"client {i} is held by another process; this one holds {self.clients()}")
        return self._sim.theta(i).detach().to("cpu", copy=True)

    def thetas(self) -> dict[int, torch.Tensor]:
        """:meth:`theta` of every client this process holds."""
        return {i: self.theta(i) for i in self.clients()}

    def every_model(self) -> tuple[dict[int, torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
        """Every client's theta and BatchNorm statistics (CPU copies, by client id) on rank 0; the
        other ranks get their own. Across processes a collective: every rank calls it in the same
        round (e.g. after :meth:`rank_zero_says`)."""
        return gather_models(self._sim)

    def rank_zero_says(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (one small all-reduce across processes), so that a choice
        rank 0 takes from the run folder it alone writes is every rank's."""
        if isinstance(self._sim.transport, InProcessTransport):
            return flag
        lead = torch.tensor(int(flag and self.rank == 0), dtype=torch.int32)
        return bool(int(self._sim.ctx.comm.all_max(lead)))

    def norms(self) -> dict[int, dict[str, torch.Tensor]]:
        """The BatchNorm statistics of every client this process holds that has BatchNorm (CPU copies,
        by client id; each client's own, never exchanged)."""
        return self._sim.ctx.fed.norm_state()

    def model(self, i: int) -> nn.Module:
        """Client ``i``'s model as an ``nn.Module`` (a copy of its architecture holding ``theta_i``
        and its BatchNorm statistics)."""
        fed = self._sim.ctx.fed
        theta = self.theta(i)
        module = copy.deepcopy(fed.cohorts[int(fed.cohort_of[i])].module).cpu()
        torch.nn.utils.vector_to_parameters(theta, module.parameters())
        return set_buffers(module, self.norms().get(i))


def _asks_stop(cb: object, answer: object) -> bool:
    """Whether ``cb``'s ``on_round_end`` answer asks to stop: a :class:`Stop`, or a boolean (Python,
    NumPy or a one-element torch tensor); ``None`` goes on; anything else is refused, naming it."""
    if answer is None or isinstance(answer, Stop | bool):
        return answer is not None and answer is not False
    if isinstance(answer, np.bool_):
        return bool(answer)
    if isinstance(answer, torch.Tensor) and answer.dtype == torch.bool and answer.numel() == 1:
        return bool(answer.item())
    shown = repr(answer)[:60]
    raise TypeError(
        f"callbacks: {type(cb).__name__}.on_round_end returned {shown} ({type(answer).__name__}); "
        "return a Stop, True / False, or None"
    )


def checked(callbacks: object) -> list[Any]:
    """The ``callbacks`` argument as a list, each a callback object (TypeError naming the argument:
    one object instead of a list, a class instead of an instance, an object with neither method)."""
    if not isinstance(callbacks, list | tuple):
        name = type(callbacks).__name__
        raise TypeError(f"callbacks takes a list of callback objects, not one {name}: give callbacks=[...]")
    for cb in callbacks:
        if isinstance(cb, type):
            raise TypeError(
                f"callbacks: {cb.__name__} is a class; give an instance, callbacks=[{cb.__name__}(...)]"
            )
        if not callable(getattr(cb, "on_round_end", None)) and not callable(getattr(cb, "on_run_end", None)):
            raise TypeError(
                f"callbacks: {type(cb).__name__} has neither on_round_end(round, metrics, view) nor "
                "on_run_end(summary)"
            )
    return list(callbacks)


class Hooks:
    """The callbacks of one run, called in order; :meth:`round_end` says which one asked to stop."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = checked(callbacks)

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def round_end(self, k: int, metrics: dict[str, Any] | None, view: RunView) -> tuple[str, str] | None:
        """Call every ``on_round_end``; ``(callback's class name, reason)`` of the first that asked
        to stop (every callback is still called), else ``None``."""
        asked = None
        for cb in self.callbacks:
            fn = getattr(cb, "on_round_end", None)
            if fn is None:
                continue
            answer = fn(k, None if metrics is None else dict(metrics), view)
            if _asks_stop(cb, answer) and asked is None:
                asked = (type(cb).__name__, answer.reason if isinstance(answer, Stop) else "")
        return asked

    def run_end(self, summary: dict[str, Any]) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, "on_run_end", None)
            if fn is not None:
                fn(dict(summary))

    def exception(self, error: BaseException) -> None:
        """Every ``on_exception(error)``: the run ends with ``error`` (raised after them)."""
        for cb in self.callbacks:
            fn = getattr(cb, "on_exception", None)
            if fn is not None:
                fn(error)


def agreed(sim: Simulation[Any], asked: tuple[str, str] | None) -> tuple[str, str] | None:
    """Across processes, whether any rank's callbacks asked to stop (one small all-reduce a round
    when the run has callbacks), so that every rank stops after the same round."""
    if isinstance(sim.transport, InProcessTransport):
        return asked
    anyone = int(sim.ctx.comm.all_max(torch.tensor(int(asked is not None), dtype=torch.int32)))
    return asked or (("callback on another process", "") if anyone else None)
