"""The Weights & Biases logger (:class:`WandbLogger`; config key ``log_wandb``): a run as one W&B
run, offline unless asked otherwise (nothing leaves the machine)."""

from __future__ import annotations

import os
import secrets
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

from .callbacks import RunView
from .reach import STOPPED, Refused, TrackerError, first_line, unanswered
from .tracking import Record, config_of, new_series, numbers, prepare_store, texts

#: The run folder's record of the W&B run (:class:`.tracking.Record`).
RECORD = "wandb.json"
MODES = ("offline", "online", "disabled")
#: How long an online run waits for W&B's server to start its run (W&B's default: 90 s).
INIT_SECONDS = 30.0


class WandbLogger:
    """A run as a W&B run, on rank 0: the config as run as its config (``lam`` and ``maps`` as
    resolved), every number of an evaluated row logged with ``round`` (each metric's x-axis; key =
    its ``metrics.csv`` column, ``val_accuracy`` on a validation split), at the end the per-edge
    series (``edge_weight/i-j`` by round, ``map_norm/i-j`` at the last round) and the summary's
    numbers and texts in the run's summary; the run finishes with exit code 0, ``128 + signal`` when
    stopped by one, 1 on an error. A resumed run continues the same W&B run (its id is kept in
    ``RUN_DIR/wandb.json``) from the round after the last one logged.

    ``mode``: ``offline`` (the default: files only, ``wandb sync`` uploads them), ``online`` or
    ``disabled``; ``dir``: the folder W&B writes its ``wandb/`` folder into (empty: the run folder,
    or W&B's own default for a run without one). Needs ``pip install 'sheaf-fmtl[wandb]'``.

    Made with ``mode="online"``, it asks W&B's server (``$WANDB_BASE_URL``, else the one ``wandb
    login`` chose) whether it answers within :data:`.reach.PROBE_SECONDS` to connect and as many to
    answer (:class:`.reach.Refused` in one line if not); W&B's start of the run then waits at most
    :data:`INIT_SECONDS`, and a start that fails (no login, a server that stops answering) ends the
    run with :class:`.reach.TrackerError` in one line."""

    def __init__(
        self, project: str = "sheaf-fmtl", mode: str = "offline", dir: str | Path = "", run_name: str = ""
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"WandbLogger: mode = {mode!r}; allowed: {', '.join(MODES)}")
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "WandbLogger (config key 'log_wandb') needs the wandb package: "
                "pip install 'sheaf-fmtl[wandb]'"
            ) from None
        self._wandb = wandb
        self.project, self.mode, self.dir, self.run_name = project, mode, str(dir), run_name
        if mode == "online":
            base = _server(wandb)
            why = unanswered(base)
            if why is not None:
                raise Refused(
                    "WandbLogger",
                    "mode",
                    mode,
                    f"W&B's server {base} does not answer ({why}); log offline (the default: `wandb sync` "
                    "uploads the files later) or point "
                    "$WANDB_BASE_URL at a server that answers",
                )
        self.run: Any = None  #: the ``wandb`` run, once the first row is logged
        self._view: RunView | None = None
        self._record = Record(None, RECORD)

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None or view.rank != 0:
            return
        if self.run is None:
            self._start(view)
        if round <= self._record.last_round:  # logged before a resume: never twice
            return
        self.run.log({"round": round, **numbers(metrics)})
        self._record.last_round = round
        self._record.save()

    def _start(self, view: RunView) -> None:
        """Start the W&B run: the one the run folder records (resumed), or a new one."""
        wandb, out = self._wandb, view.out
        self._view, self._record = view, Record(out, RECORD)
        base = Path(self.dir).expanduser() if self.dir else out
        if base is not None:
            prepare_store(out, base / "wandb")  # (W&B writes into DIR/wandb)
        run_id = self._record.run_id or secrets.token_hex(4)  # (W&B's ids: 8 letters and digits)
        settings = wandb.Settings(
            silent=True,
            console="off",
            reinit="create_new",  # (a W&B run of yours stays as it is)
            disable_git=True,
            save_code=False,
            x_disable_stats=True,
            x_disable_machine_info=True,
            x_save_requirements=False,
            init_timeout=INIT_SECONDS,
        )
        try:
            self.run = wandb.init(
                project=self.project,
                mode=self.mode,
                dir=None if base is None else str(base),
                id=run_id,
                resume="allow",
                name=self.run_name or (out.name if out is not None else None),
                config=config_of(view.config),
                allow_val_change=True,  # (a resume may change rounds, eval_every, ...)
                settings=settings,
            )
        except wandb.errors.Error as e:  # (no login, a server that stopped answering, ...)
            raise TrackerError(
                f"WandbLogger: W&B could not start its {self.mode} run ({first_line(e)}); {STOPPED}"
            ) from None
        self.run.define_metric("round")
        self.run.define_metric("*", step_metric="round")
        self._record.run_id = run_id
        self._record.save()

    def on_run_end(self, summary: dict[str, Any]) -> None:
        if self.run is None or self._view is None:
            return
        record = self._record
        by_round: dict[int, dict[str, float]] = defaultdict(dict)
        for key, r, value in new_series(self._view.final_state, max(record.last_round, 0), record):
            by_round[r][key] = value
        for r in sorted(by_round):
            self.run.log({"round": r, **by_round[r]})
        self.run.summary.update({**numbers(summary), **texts(summary)})
        record.save()
        name = str(summary.get("signal"))
        stopped = summary.get("status") == "interrupted" and name in signal.Signals.__members__
        self.run.finish(exit_code=128 + signal.Signals[name].value if stopped else 0)
        self.run = None

    def on_exception(self, error: BaseException) -> None:
        """The run ended with ``error``: its W&B run finishes with exit code 1."""
        if self.run is None:
            return
        try:
            self.run.summary["error"] = f"{type(error).__name__}: {str(error)[:500]}"
            self.run.finish(exit_code=1)
        except Exception:  # noqa: BLE001 - the run's own error is the one raised
            pass
        self.run = None


def _server(wandb: Any) -> str:  # noqa: ANN401 - the wandb module
    """The W&B server an online run talks to: ``$WANDB_BASE_URL``, else the one of W&B's settings
    files (``wandb login --host``), else W&B's default."""
    try:
        from wandb.sdk import wandb_setup

        return str(wandb_setup.singleton().settings.base_url)
    except Exception:  # noqa: BLE001 - another W&B version: the environment, else its default
        return os.environ.get("WANDB_BASE_URL") or str(wandb.Settings().base_url)
