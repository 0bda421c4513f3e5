"""Which MLflow stores the MLflow logger (:mod:`.mlflow_logger`) may be given, judged before a run
starts: an experiment name MLflow accepts, a URI of a kind MLflow has a store for (a database one
only with the full ``mlflow`` package), and a server that answers (:func:`.reach.unanswered`)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .reach import Refused, unanswered

#: MLflow's longest experiment name.
MAX_EXPERIMENT_CHARS = 500
#: The URI schemes of MLflow's database stores (``sqlite:///mlflow.db``, ``postgresql://...``).
DATABASES = ("sqlite", "postgresql", "mysql", "mssql")


def check_experiment(experiment: str) -> None:
    """An experiment name MLflow accepts: 1 to 500 characters, not only spaces."""
    if not isinstance(experiment, str) or not experiment.strip() or len(experiment) > MAX_EXPERIMENT_CHARS:
        raise Refused(
            "MLflowLogger",
            "experiment",
            str(experiment),
            f"MLflow files a run under a named experiment: give a name of 1 to {MAX_EXPERIMENT_CHARS} "
            "characters (e.g. sheaf-fmtl, the default)",
        )


def check_store(make: Any, tracking_uri: str) -> None:  # noqa: ANN401 - MlflowClient
    """The store ``tracking_uri`` (else ``$MLFLOW_TRACKING_URI``) names can be opened: MLflow has a
    store of its kind (a database one needs the full package) and a server answers the probe."""
    argument, uri = ("tracking_uri", tracking_uri) if tracking_uri else ("$MLFLOW_TRACKING_URI", "")
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri or local_store(uri) is not None:
        return
    scheme = urlparse(uri).scheme.split("+")[0].lower()
    if scheme in DATABASES and not all(_importable(m) for m in ("sqlalchemy", "alembic")):
        raise Refused(
            "MLflowLogger",
            argument,
            uri,
            "a database store needs the full mlflow package (pip install mlflow, with SQLAlchemy); "
            "mlflow-skinny writes a file store (leave the URI empty: the run folder's mlruns/) or to an "
            "MLflow server (http://HOST:PORT)",
        )
    from mlflow.exceptions import MlflowException

    try:
        make(tracking_uri=uri)  # (opens no connection: refuses a kind of URI MLflow has no store for)
    except MlflowException:
        raise Refused(
            "MLflowLogger",
            argument,
            uri,
            "MLflow opens no store at a URI of this kind; give a folder or file: URI (a file store), "
            "http(s)://HOST:PORT (an MLflow server), databricks, or a database URI (sqlite:///FILE, "
            "with the full mlflow package)",
        ) from None
    if scheme in ("http", "https"):
        why = unanswered(uri.rstrip("/") + "/health")
        if why is not None:
            raise Refused(
                "MLflowLogger",
                argument,
                uri,
                f"no MLflow server answers there ({why}); start it "
                "(mlflow server --port PORT) or leave the URI empty for a file store in the run folder",
            )


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def local_store(uri: str) -> Path | None:
    """The folder of a local file store URI (``file:...`` or a plain path), ``None`` for another kind."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        return Path(uri)
    return None
