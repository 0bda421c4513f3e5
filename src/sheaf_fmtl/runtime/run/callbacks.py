"""Code run by the round loop (:mod:`.loop`): after every round (``on_round_end``) and at the end
(``on_run_end``). A callback that returns a :class:`Stop` from ``on_round_end`` ends the run after
that round with a resumable checkpoint (``summary.json``: ``status = stopped``, ``stopped_by``);
``--resume`` / ``resume=`` continues it to the end, to the uninterrupted run's numbers.

Shipped: :class:`CSVLogger` (the rows of ``metrics.csv``), :class:`TensorBoardLogger`,
:class:`EarlyStopping` (on the validation split: it refuses a run with ``validation = 0``, whose
evaluations are on the test split) and :class:`BestCheckpoint` (the thetas of the best evaluation).
The config key ``log_tensorboard`` adds the second to any run, ``early_stop_patience`` the third
and the fourth (:func:`from_config`).
"""

from __future__ import annotations

import copy
import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from ...config import ConfigError, RunConfig
from ...plugins import higher_is_better
from ..engine.transport import InProcessTransport

if TYPE_CHECKING:
    from ..engine.simulate import Simulation


@dataclass(frozen=True)
class Stop:
    """What ``on_round_end`` returns to end the run after this round (``reason``: for the summary)."""

    reason: str = ""


@runtime_checkable
class Callback(Protocol):
    """Both methods are optional: an object with either one is a callback.

    ``on_round_end(round, metrics, view)``: after every round (and for round 0, the initial
    models, in a run that is not resumed); ``metrics`` is the round's row of ``metrics.csv``
    (``round``, ``test_accuracy`` or ``test_mse``, ``train_loss``, ...) when the round was
    evaluated, else ``None``; ``view`` reads the clients' models (:class:`RunView`). Return a
    :class:`Stop` (or ``True``, also a NumPy or one-element torch boolean) to end the run after this
    round (from round 1 on); ``None`` or ``False`` goes on; anything else is refused.
    ``on_run_end(summary)``: once, with what ``summary.json`` holds (not for a diverged run).
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
        self.metric_column = f"test_{self.metric}"  #: its key in the rows
        self.higher_is_better: bool | None = higher_is_better(
            sim.config.metric_goal, sim.config.metric, self.metric
        )

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

    def model(self, i: int) -> nn.Module:
        """Client ``i``'s model as an ``nn.Module`` (a copy of its architecture holding ``theta_i``)."""
        fed = self._sim.ctx.fed
        theta = self.theta(i)
        module = copy.deepcopy(fed.cohorts[int(fed.cohort_of[i])].module).cpu()
        torch.nn.utils.vector_to_parameters(theta, module.parameters())
        return module


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


class CSVLogger:
    """The evaluated rows, one line each, as ``metrics.csv`` holds them (columns in the order the
    first row gives; a file of its own, e.g. outside the run folder)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._columns: list[str] | None = None

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None or view.rank != 0:
            return
        new = self._columns is None
        if self._columns is None:
            self._columns = list(metrics)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w" if new else "a", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            if new:
                writer.writerow(self._columns)
            writer.writerow(["" if metrics.get(c) is None else _cell(metrics[c]) for c in self._columns])


def _cell(v: Any) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v)) if math.isfinite(float(v)) else ""


class TensorBoardLogger:
    """Every evaluated number of a row as a scalar (tag = its ``metrics.csv`` column, step = the
    round) with ``torch.utils.tensorboard.SummaryWriter`` into ``log_dir`` (needs the
    ``tensorboard`` package: ``pip install 'sheaf-fmtl[tensorboard]'``)."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError(
                "TensorBoardLogger (config key 'log_tensorboard') needs the tensorboard package: "
                "pip install 'sheaf-fmtl[tensorboard]'"
            ) from None
        self.log_dir = Path(log_dir)
        self._make = SummaryWriter
        self._writer: Any = None

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None or view.rank != 0:
            return
        if self._writer is None:
            self._writer = self._make(log_dir=str(self.log_dir))
        for key, value in metrics.items():
            if key != "round" and isinstance(value, int | float) and math.isfinite(value):
                self._writer.add_scalar(key, value, global_step=round)
        self._writer.flush()

    def on_run_end(self, summary: dict[str, Any]) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _improves(value: float, best: float | None, higher: bool, min_delta: float) -> bool:
    if best is None:
        return True
    return value > best + min_delta if higher else value < best - min_delta


class EarlyStopping:
    """Stop when the evaluated metric (``metrics.csv``'s ``test_*`` column; the validation split
    with ``validation > 0``) has not improved by more than ``min_delta`` for ``patience``
    evaluations in a row. ``goal``: ``max`` / ``min``, or ``auto`` from the run's ``metric_goal``
    (accuracy: higher is better, MSE: lower)."""

    def __init__(self, patience: int, min_delta: float = 0.0, goal: str = "auto") -> None:
        if patience < 1:
            raise ValueError(f"EarlyStopping: patience = {patience}; expected an integer >= 1")
        if min_delta < 0:
            raise ValueError(f"EarlyStopping: min_delta = {min_delta}; expected >= 0")
        if goal not in ("auto", "max", "min"):
            raise ValueError(f"EarlyStopping: goal = {goal!r}; allowed: auto, max, min")
        self.patience, self.min_delta, self.goal = patience, min_delta, goal
        self.best: float | None = None
        self.best_round: int | None = None
        self.bad = 0  # evaluations in a row without improvement

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> Stop | None:
        if metrics is None:
            return None
        if view.config.validation == 0:
            raise ValueError(
                "EarlyStopping watches the validation split, and this run has validation = 0 (its "
                "evaluations are on the test split, which must not choose when to stop); set validation=0.2"
            )
        value = float(metrics[view.metric_column])
        higher = _higher(self.goal, view)
        if _improves(value, self.best, higher, self.min_delta):
            self.best, self.best_round, self.bad = value, round, 0
            return None
        self.bad += 1
        if self.bad < self.patience:
            return None
        return Stop(
            f"{view.metric} did not improve by more than {self.min_delta} for {self.patience} evaluations "
            f"(best {self.best:.6g} at round {self.best_round})"
        )


def _higher(goal: str, view: RunView) -> bool:
    if goal != "auto":
        return goal == "max"
    if view.higher_is_better is None:
        raise ValueError(
            f"EarlyStopping: whether a higher {view.metric} is better is unknown; set metric_goal=max or min"
        )
    return view.higher_is_better


class BestCheckpoint:
    """The thetas of the best evaluation so far, kept in :attr:`thetas` and, for a run with a
    folder, saved to ``RUN_DIR/best.pt`` (``{"round", "metric", "value", "thetas"}``, ``thetas``
    a list in client order) each time the evaluated metric improves. A resumed run starts from the
    ``best.pt`` its folder holds (``sheaf_fmtl.load(run, round="best")`` reads it)."""

    def __init__(self, goal: str = "auto", filename: str = "best.pt") -> None:
        self.goal, self.filename = goal, filename
        self.best: float | None = None
        self.round: int | None = None
        self.thetas: dict[int, torch.Tensor] = {}

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None:
            return
        if self.best is None and view.out is not None and (view.out / self.filename).is_file():
            saved = torch.load(view.out / self.filename, map_location="cpu", weights_only=True)
            if int(saved["round"]) < round:  # kept before a stop: the best so far
                self.best, self.round = float(saved["value"]), int(saved["round"])
                self.thetas = dict(enumerate(saved["thetas"]))
        value = float(metrics[view.metric_column])
        if not _improves(value, self.best, _higher(self.goal, view), 0.0):
            return
        self.best, self.round, self.thetas = value, round, view.thetas()
        if view.out is not None and view.rank == 0 and len(self.thetas) == view.num_clients:
            payload = {"round": round, "metric": view.metric, "value": value}
            payload["thetas"] = [self.thetas[i] for i in range(view.num_clients)]
            tmp = view.out / f".{self.filename}.tmp"
            torch.save(payload, tmp)
            tmp.replace(view.out / self.filename)


def agreed(sim: Simulation[Any], asked: tuple[str, str] | None) -> tuple[str, str] | None:
    """Across processes, whether any rank's callbacks asked to stop (one small all-reduce a round
    when the run has callbacks), so that every rank stops after the same round."""
    if isinstance(sim.transport, InProcessTransport):
        return asked
    anyone = int(sim.ctx.comm.all_max(torch.tensor(int(asked is not None), dtype=torch.int32)))
    return asked or (("callback on another process", "") if anyone else None)


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written (its nearest existing part is a file or a folder
    this process may not write), ``None`` when it can."""
    for part in (folder, *folder.parents):
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                return f"{part} is a file, not a folder"
            if not os.access(part, os.W_OK | os.X_OK):
                return f"{part} is a folder this process may not write"
            return None
    return None


def from_config(config: RunConfig) -> list[Any]:
    """The callbacks the config keys ask for: ``log_tensorboard`` and ``early_stop_patience``."""
    out: list[Any] = []
    if config.log_tensorboard:
        problem = _unwritable(Path(config.log_tensorboard).expanduser())
        if problem is not None:  # checked before the run folder is touched
            raise ConfigError(
                f"config key 'log_tensorboard' = {config.log_tensorboard}: {problem}; give a folder "
                "TensorBoard can write (nothing was written)"
            )
        try:
            out.append(TensorBoardLogger(config.log_tensorboard))
        except ImportError:
            raise ConfigError(
                f"config key 'log_tensorboard' = {config.log_tensorboard} needs the tensorboard package: "
                "pip install 'sheaf-fmtl[tensorboard]'"
            ) from None
    if config.early_stop_patience > 0:
        out.append(EarlyStopping(config.early_stop_patience, config.early_stop_min_delta))
        out.append(BestCheckpoint())
    return out
