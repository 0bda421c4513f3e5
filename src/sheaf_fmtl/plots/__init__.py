"""Figures from recorded results only (``metrics.csv``, ``config.yaml``, ``summary.json``,
``checkpoint.pt``): ``plot_runs`` (``sheaf-fmtl plot``) and ``plot_demo`` (``sheaf-fmtl demo``)."""

from .demo import plot_demo
from .runs import plot_runs

__all__ = ["plot_demo", "plot_runs"]
