"""The callbacks the library ships (how the round loop calls them: :mod:`.callbacks`):
:class:`CSVLogger` (the rows of ``metrics.csv``), :class:`TensorBoardLogger`,
:class:`EarlyStopping` (on the validation split: it refuses a run with ``validation = 0``, whose
evaluations are on the test split) and :class:`BestCheckpoint` (the thetas of the best evaluation).
The config key ``log_tensorboard`` adds the second to any run, ``early_stop_patience`` the third
and the fourth, ``log_mlflow`` and ``log_wandb`` the MLflow and W&B loggers (:mod:`.mlflow_logger`,
:mod:`.wandb_logger`) (:func:`from_config`)."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from ....config import ConfigError, RunConfig
from ....config.files import replace_file
from ....data.bounded import read_text_bounded
from ....metrics.final import BEST, file_digest, save_state
from ....spelling import setting
from ..checkpoints.integrity import CheckpointError
from ..folder.clearing import check_replaceable, claim_entry
from .callbacks import RunView, Stop
from .trackers import from_config as trackers


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
    """Every evaluated number of a row as a scalar (tag = its ``metrics.csv`` column, e.g.
    ``test_accuracy``, or ``val_accuracy`` when a validation split is scored; step = the round)
    with ``torch.utils.tensorboard.SummaryWriter`` into ``log_dir`` (needs the ``tensorboard``
    package: ``pip install 'sheaf-fmtl[tensorboard]'``)."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            fix = "needs the tensorboard package: pip install 'sheaf-fmtl[tensorboard]'"
            raise ImportError(f"TensorBoardLogger (config key 'log_tensorboard') {fix}") from None
        self.log_dir, self._make = Path(log_dir), SummaryWriter
        self._writer: Any = None

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None or view.rank != 0:
            return
        if self._writer is None:
            claim_entry(view.out, self.log_dir)  # (a folder it creates in the run folder is its own)
            try:
                self._writer = self._make(log_dir=str(self.log_dir))
            except OSError as e:  # (a folder the checks could not judge: /proc, a read-only mount)
                fix = "give a folder TensorBoard can write (config key 'log_tensorboard')"
                raise OSError(
                    f"TensorBoardLogger: cannot write {self.log_dir} ({e.strerror}); {fix}"
                ) from None
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
    """Stop when the validation metric (``metrics.csv``'s ``val_*`` column: ``validation > 0``) has
    not improved by more than ``min_delta`` for ``patience`` evaluations in a row. ``goal``: ``max``
    / ``min``, or ``auto`` from the run's ``metric_goal`` (accuracy: higher is better, MSE: lower)."""

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
                "evaluations are on the test split, which must not choose when to stop); set "
                f"{setting('validation', 0.2)}"
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
            f"EarlyStopping: whether a higher {view.metric} is better is unknown; set "
            f"{setting('metric_goal', 'max')} or {setting('metric_goal', 'min')}"
        )
    return view.higher_is_better


class BestCheckpoint:
    """The thetas of the best evaluation so far, kept in :attr:`thetas` (across processes every
    client's on rank 0, gathered when the metric improves) and, for a run with a folder, saved to
    ``RUN_DIR/best.pt`` (``{"round", "metric", "value", "thetas"}``, ``thetas`` a list in client
    order, with models with BatchNorm ``batchnorm``: each client's statistics or ``None``) each time
    the evaluated metric improves. A resumed run starts from the ``best.pt`` its folder holds
    (``sheaf_fmtl.load(run, round="best")`` reads it)."""

    def __init__(self, goal: str = "auto", filename: str = BEST) -> None:
        self.goal, self.filename = goal, filename
        self.best: float | None = None
        self.round: int | None = None
        self.thetas: dict[int, torch.Tensor] = {}
        self.norms: dict[int, dict[str, torch.Tensor]] = {}  # BatchNorm statistics, by client id
        self.written = False  #: this run wrote its file (``summary.json`` then records it)

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None:
            return
        if self.best is None and not self.written and view.out is not None:
            check_replaceable(view.out, [self.filename], "BestCheckpoint(filename=...)")  # not yours
            saved = _saved_best(view.out / self.filename, view.num_clients)
            if saved is not None and int(saved["round"]) < round:  # kept before a stop: the best so far
                self.best, self.round = float(saved["value"]), int(saved["round"])
                self.thetas = dict(enumerate(saved["thetas"]))
                self.norms = {i: b for i, b in enumerate(saved.get("batchnorm") or []) if b}
        value = float(metrics[view.metric_column])
        improved = _improves(value, self.best, _higher(self.goal, view), 0.0)
        if not view.rank_zero_says(improved):  # (rank 0 alone read the best a stopped run kept)
            return
        self.best, self.round = value, round
        self.thetas, self.norms = view.every_model()  # across processes: every client's, on rank 0
        if view.out is not None and view.rank == 0 and len(self.thetas) == view.num_clients:
            payload: dict[str, Any] = {"round": round, "metric": view.metric, "value": value}
            payload["thetas"] = [self.thetas[i] for i in range(view.num_clients)]
            if self.norms:
                payload["batchnorm"] = [self.norms.get(i) for i in range(view.num_clients)]
            path = view.out / self.filename
            if not self.written:  # (a file of yours of that name was refused above)
                claim_entry(view.out, path)
            replace_file(path, lambda f: save_state(payload, f))  # (a full disk: its OSError)
            self.written = True


def _saved_best(path: Path, clients: int | None) -> dict[str, Any] | None:
    """The best evaluation a stopped run kept in ``path`` (``None``: none kept), checked: a file that
    cannot be read, or does not hold a round, a finite value and one vector per client, is refused in
    one line (CheckpointError) before the run goes on."""
    if not path.is_file() or path.is_symlink():
        return None
    why: str | None
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling, zip and truncation errors alike
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    else:
        why = _not_a_best(saved, clients)
        if why is None:
            return dict(saved)
    raise CheckpointError(
        f"{path} cannot be read as the best evaluation this run kept ({why}); remove it to keep the "
        "best of the rounds still to run (nothing was changed)"
    )


def _not_a_best(saved: object, clients: int | None) -> str | None:
    if not isinstance(saved, dict) or not {"round", "value", "thetas"} <= set(saved):
        return "no round, value and thetas"
    thetas, value = saved["thetas"], saved["value"]
    if not isinstance(saved["round"], int) or not isinstance(value, float) or not math.isfinite(value):
        return "its round or value is not a number"
    if not isinstance(thetas, list) or not all(torch.is_tensor(t) for t in thetas):
        return "its thetas are not a list of parameter vectors"
    if clients is not None and len(thetas) != clients:
        return f"{len(thetas)} parameter vectors for {clients} clients"
    return None


def check_kept_best(run_dir: Path) -> None:
    """Before a resume changes anything: the run folder's ``best.pt`` (when there is one) can be read
    as a best evaluation and, when ``summary.json`` records it (``best``), is the file recorded
    (CheckpointError in one line otherwise)."""
    path = run_dir / BEST
    if path.is_symlink() or not path.is_file():
        return
    try:
        want = json.loads(read_text_bounded(run_dir / "summary.json")).get("best")
    except (OSError, ValueError, AttributeError):
        want = None  # (no summary: a run killed before it wrote one)
    if isinstance(want, dict) and (  # (the size first: a file of gigabytes is not even read)
        path.stat().st_size != want.get("bytes") or file_digest(path)["sha256"] != want.get("sha256")
    ):
        raise CheckpointError(
            f"{path} differs from the best evaluation its summary.json recorded (altered, or from another "
            "run); remove it to keep the best of the rounds still to run (nothing was changed)"
        )
    _saved_best(path, None)  # readable as a best evaluation


def best_record(callbacks: list[Any], folder: Path | None) -> dict[str, Any]:
    """``summary.json``'s ``best``: the round, value, size and SHA-256 of ``best.pt`` as this run's
    :class:`BestCheckpoint` left it; ``{}`` when this run kept none (e.g. resumed without
    ``early_stop_patience``: a ``best.pt`` left from before is then not vouched for)."""
    for cb in callbacks:
        if isinstance(cb, BestCheckpoint) and cb.filename == BEST and cb.round is not None:
            path = None if folder is None else folder / BEST
            if path is not None and path.is_file() and not path.is_symlink():
                return {"best": {"round": cb.round, "value": cb.best, **file_digest(path)}}
    return {}


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
    """The callbacks the config keys ask for: ``log_tensorboard``, ``log_mlflow``, ``log_wandb`` and
    ``early_stop_patience``."""
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
    out += trackers(config)
    if config.early_stop_patience > 0:
        out.append(EarlyStopping(config.early_stop_patience, config.early_stop_min_delta))
        out.append(BestCheckpoint())
    return out
