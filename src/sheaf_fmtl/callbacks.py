"""Callbacks for :func:`sheaf_fmtl.run` and :meth:`sheaf_fmtl.Federation.run` (``callbacks=[...]``):
code run after every round and at the end of a run, and the shipped loggers (CSV, TensorBoard,
MLflow, W&B), early stopping and best-round checkpoint (:mod:`sheaf_fmtl.runtime.run.callbacks.callbacks`
says how the loop calls them).

Example::

    from sheaf_fmtl.callbacks import EarlyStopping, Stop, TensorBoardLogger

    class StopAt:
        def on_round_end(self, round, metrics, view):
            return Stop("enough") if round == 30 else None

    sheaf_fmtl.run(dataset="school", rounds=200, callbacks=[TensorBoardLogger("tb"), EarlyStopping(5)])
"""

from .runtime.run.callbacks.callbacks import Callback, RunView, Stop
from .runtime.run.callbacks.mlflow_logger import MLflowLogger
from .runtime.run.callbacks.shipped_callbacks import (
    BestCheckpoint,
    CSVLogger,
    EarlyStopping,
    TensorBoardLogger,
)
from .runtime.run.callbacks.wandb_logger import WandbLogger

__all__ = [
    "BestCheckpoint",
    "CSVLogger",
    "Callback",
    "EarlyStopping",
    "MLflowLogger",
    "RunView",
    "Stop",
    "TensorBoardLogger",
    "WandbLogger",
]
