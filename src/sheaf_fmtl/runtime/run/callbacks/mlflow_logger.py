"""The MLflow logger (:class:`MLflowLogger`; config key ``log_mlflow``): a run as one MLflow run,
written with ``mlflow.tracking.MlflowClient`` (no global active run is set or changed)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..folder.clearing import OWNED
from .callbacks import RunView
from .mlflow_store import check_experiment, check_store, local_store
from .reach import FINISHED, STOPPED, TrackerError, cause, environment, first_line
from .tracking import Record, new_series, numbers, params_of, prepare_store, texts, tracker_uri

#: The run folder's record of the MLflow run (:class:`.tracking.Record`).
RECORD = "mlflow.json"
#: How a run's ``summary.json`` status ends its MLflow run.
STATUS = {"ok": "FINISHED", "stopped": "FINISHED", "interrupted": "KILLED"}
_BATCH = 1000  # metrics per ``log_batch`` (MLflow's limit); parameters: 100
#: MLflow's HTTP settings while the logger calls a server, unless the environment sets them: each
#: request waits at most 10 s and is tried 3 times, 1 s and 2 s apart (MLflow's own defaults, 120 s
#: and 8 tries with growing waits, hold a run for minutes on a server that is down).
HTTP_BOUNDS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}


class MLflowLogger:
    """A run as an MLflow run, on rank 0: the config as run as parameters (``lam`` and ``maps`` as
    resolved; ``data.NAME`` for a dataset's option), every number of an evaluated row as a metric
    (key = its ``metrics.csv`` column, ``val_accuracy`` on a validation split; step = the round),
    at the end the per-edge series (``edge_weight/i-j`` by round, ``map_norm/i-j`` at the last round),
    the summary's numbers (``summary.final``, ``summary.best_test_accuracy``, ...) and texts (tags
    ``summary.status``, ``summary.maps``, ...), and ``summary.json``, ``config.yaml``, ``metrics.csv``
    and the run folder's figures as artifacts; the run ends ``FINISHED``, ``KILLED`` (stopped by a
    signal) or ``FAILED`` (an error, a diverged run). A resumed run continues the same MLflow run
    (its id is kept in ``RUN_DIR/mlflow.json``) from the round after the last one logged.

    ``tracking_uri``: empty for ``$MLFLOW_TRACKING_URI``, else a file store in the run folder
    (``RUN_DIR/mlruns``; ``./mlruns`` for a run without one). MLflow 3 opens a file store only with
    ``MLFLOW_ALLOW_FILE_STORE=true``, which this logger sets when its store is one. Needs the
    ``mlflow-skinny`` package: ``pip install 'sheaf-fmtl[mlflow]'``; a database store
    (``sqlite:///...``) needs the full ``mlflow`` package.

    Made, it checks its destination (:class:`.reach.Refused` in one line): an empty or too long
    ``experiment``, a URI MLflow opens no store for, a database store without the full package,
    and a server (``http://...``) that does not answer within :data:`.reach.PROBE_SECONDS` to
    connect and as many to answer. During the run each call to a server is bounded
    (:data:`HTTP_BOUNDS`); one that fails ends the run with :class:`.reach.TrackerError`."""

    def __init__(self, tracking_uri: str = "", experiment: str = "sheaf-fmtl", run_name: str = "") -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError(
                "MLflowLogger (config key 'log_mlflow') needs the mlflow-skinny package: "
                "pip install 'sheaf-fmtl[mlflow]'"
            ) from None
        self._make = MlflowClient
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        check_experiment(experiment)
        check_store(MlflowClient, tracking_uri)
        self.run_id: str | None = None  #: the MLflow run's id, once the first row is logged
        self._client: Any = None
        self._view: RunView | None = None
        self._record = Record(None, RECORD)

    def on_round_end(self, round: int, metrics: dict[str, Any] | None, view: RunView) -> None:
        if metrics is None or view.rank != 0:
            return
        with self._calls(f"round {round}", STOPPED):
            if self._client is None:
                self._start(view)
            if round <= self._record.last_round:  # logged before a resume: never twice
                return
            self._metrics(numbers(metrics).items(), round)
        self._record.last_round = round
        self._record.save()

    @contextmanager
    def _calls(self, when: str, then: str) -> Iterator[None]:
        """MLflow's calls within :data:`HTTP_BOUNDS`; one that fails raises :class:`TrackerError`
        in one line, ending with ``then`` (the logger then calls its store no more)."""
        from mlflow.exceptions import MlflowException

        try:
            with environment(HTTP_BOUNDS):
                yield
        except MlflowException as e:
            self._client = None
            uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "") or "the run folder's store"
            raise TrackerError(f"MLflowLogger: logging {when} to {uri} failed ({cause(e)}); {then}") from None

    def _start(self, view: RunView) -> None:
        """Open the store and the MLflow run: the one the run folder records, or a new one."""
        from mlflow.entities import Param

        self._view, out = view, view.out
        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            uri = tracker_uri((out if out is not None else Path.cwd()) / "mlruns")
        local = local_store(uri)
        if local is not None:
            from mlflow.store.tracking.file_store import FileStore

            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # (MLflow 3 refuses one otherwise)
            # (created by MLflow itself, with its default experiment)
            prepare_store(out, local, lambda path: FileStore(str(path)))  # type: ignore[no-untyped-call]
        self._client = client = self._make(tracking_uri=uri)
        self._record = record = Record(out, RECORD)
        params = params_of(view.config)
        logged = _params_of_run(client, record.run_id)
        if record.run_id is not None and logged is not None:
            client.update_run(record.run_id, status="RUNNING")  # a resume: the same run goes on
            self.run_id = record.run_id
            for key, value in params.items():  # (a parameter is never changed: a resume's new value is a tag)
                if key in logged and logged[key] != value:
                    client.set_tag(record.run_id, f"resumed.{key}", value)
            params = {k: v for k, v in params.items() if k not in logged}
        else:
            found = client.get_experiment_by_name(self.experiment)
            experiment = found.experiment_id if found else client.create_experiment(self.experiment)
            name = self.run_name or (out.name if out is not None else None)
            tags = {} if out is None else {"sheaf_fmtl.run_dir": str(out.resolve())}
            self.run_id = client.create_run(experiment, run_name=name, tags=tags).info.run_id
            record.run_id, record.last_round, record.series_until = self.run_id, -1, -1
        items = [Param(k, v) for k, v in params.items()]
        for first in range(0, len(items), 100):
            client.log_batch(self.run_id, params=items[first : first + 100])
        record.save()

    def _metrics(self, values: Any, step: int) -> None:  # noqa: ANN401 - (key, value) pairs
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in values]
        for first in range(0, len(batch), _BATCH):
            self._client.log_batch(self.run_id, metrics=batch[first : first + _BATCH])

    def on_run_end(self, summary: dict[str, Any]) -> None:
        if self._client is None or self._view is None:
            return
        with self._calls("the run's end", FINISHED):
            self._end(summary)

    def _end(self, summary: dict[str, Any]) -> None:
        view, record, client = self._view, self._record, self._client
        assert view is not None
        last = max(record.last_round, 0)
        series = new_series(view.final_state, last, record)
        for step in sorted({s[1] for s in series}):
            self._metrics(((k, v) for k, r, v in series if r == step), step)
        self._metrics(((f"summary.{k}", v) for k, v in numbers(summary).items()), last)
        for key, value in texts(summary).items():
            client.set_tag(self.run_id, f"summary.{key}", value)
        for path in _artifacts(view.out):
            client.log_artifact(self.run_id, str(path))
        record.save()
        client.set_terminated(self.run_id, status=STATUS.get(str(summary.get("status")), "FAILED"))
        self._client = None

    def on_exception(self, error: BaseException) -> None:
        """The run ended with ``error``: its MLflow run ends ``FAILED``, the error's line a tag."""
        if self._client is None or self.run_id is None:
            return
        try:
            with environment(HTTP_BOUNDS):
                self._client.set_tag(self.run_id, "error", f"{type(error).__name__}: {first_line(error)}")
                self._client.set_terminated(self.run_id, status="FAILED")
        except Exception:  # noqa: BLE001 - the run's own error is the one raised
            pass
        self._client = None


def _params_of_run(client: Any, run_id: str | None) -> dict[str, str] | None:  # noqa: ANN401 - MlflowClient
    """The parameters of the MLflow run ``run_id`` in ``client``'s store; ``None`` when it holds no
    such run (a record from another store: the run starts a new one)."""
    if run_id is None:
        return None
    try:
        return dict(client.get_run(run_id).data.params)
    except Exception:  # noqa: BLE001 - MlflowException: no such run here
        return None


def _artifacts(out: Path | None) -> list[Path]:
    """The run folder's summary, config, rows and figures (what the library wrote there)."""
    if out is None:
        return []
    names = ("summary.json", "config.yaml", "metrics.csv")
    figures = sorted(p.name for p in out.iterdir() if p.suffix in (".png", ".pdf", ".svg"))
    return [
        out / n
        for n in (*names, *(f for f in figures if OWNED.fullmatch(f)))
        if (out / n).is_file() and not (out / n).is_symlink()
    ]
