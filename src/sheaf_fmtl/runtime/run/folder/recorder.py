"""Run folder writer: ``metrics.csv`` (flushed per evaluation, so nothing is lost on failure),
``summary.json``, ``config.yaml`` and the final checkpoint; or, without a folder, the rows in memory."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import torch

from ...._version import __version__
from ....config import RunConfig, save_config
from ....config.files import replace_file
from ....metrics.final import FINAL, file_digest, save_state
from ....metrics.results import LEGACY_METRIC_COLUMN, METRIC_COLUMNS, PREFIXES, metric_column, split_of


def software_versions() -> dict[str, str]:
    """What produced a run (recorded in ``config.yaml`` and ``summary.json``)."""
    return {"sheaf_fmtl": __version__, "torch": str(torch.__version__)}


class Recorder:
    """Rows of evaluated rounds (``log`` takes them with the key ``test_metric``, stored as the
    evaluated split's column: ``test_accuracy``, or ``val_accuracy`` with ``validation > 0``), and the run
    folder when ``out_dir`` is given (created here: callers check and clear it before,
    :mod:`sheaf_fmtl.runtime.run.folder.rundir`).

    ``rows``: a resumed run's rows up to its checkpoint (as :attr:`rows` held them);
    ``metrics.csv`` is rewritten with exactly these (rows evaluated after the checkpoint by the
    stopped run are dropped: the resumed run evaluates them again) and the run appends to it."""

    def __init__(
        self,
        out_dir: str | Path | None,
        config: RunConfig,
        metric: str = "accuracy",
        rows: list[dict[str, Any]] | None = None,
    ) -> None:
        self.dir = None if out_dir is None else Path(out_dir)
        self.config = config
        self.column = metric_column(metric, split_of(config.validation))
        self.columns = tuple(self.column if c == LEGACY_METRIC_COLUMN else c for c in METRIC_COLUMNS)
        self.rows: list[dict[str, Any]] = [self._renamed(r, metric) for r in rows or []]
        self._file = None
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        save_config(config, self.dir / "config.yaml", {"versions": software_versions()})
        path, text = self.dir / "metrics.csv", io.StringIO()
        writer = csv.writer(text, lineterminator="\n")  # header and the rows so far, written whole
        writer.writerow(self.columns)
        writer.writerows(self._cells(r) for r in self.rows)
        replace_file(path, text.getvalue())
        self._file = open(path, "a", newline="")
        self._csv = csv.writer(self._file, lineterminator="\n")

    def _renamed(self, row: dict[str, Any], metric: str) -> dict[str, Any]:
        """A resumed run's row under this recorder's names (a validation run checkpointed before
        validation had its own names kept its metric as ``test_*``)."""
        old = PREFIXES["test"] + metric
        return {self.column if k == old else k: v for k, v in row.items()}

    def _cells(self, named: dict[str, Any]) -> list[str]:
        return ["" if named.get(c) is None else _fmt(named[c]) for c in self.columns]

    def log(self, row: dict[str, Any]) -> None:
        """One evaluated round; ``row["test_metric"]`` is stored under :attr:`column`."""
        named = {self.column if k == LEGACY_METRIC_COLUMN else k: v for k, v in row.items()}
        self.rows.append(named)
        if self._file is not None:
            whole = self._file.tell()
            try:
                self._csv.writerow(self._cells(named))
                self._file.flush()
            except OSError:  # (a full disk): no part of a row is left behind
                self.rows.pop()
                self._file = _cut(self._file, whole)
                self._csv = csv.writer(self._file, lineterminator="\n")
                raise

    def checkpoint(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        """Write ``checkpoint.pt``; its size and SHA-256 (``summary.json`` records them, and every
        reader checks them: :mod:`sheaf_fmtl.metrics.final`), ``None`` without a folder."""
        if self.dir is None:
            return None
        replace_file(self.dir / FINAL, lambda f: save_state(payload, f))
        return file_digest(self.dir / FINAL)

    def summary(self, payload: dict[str, Any]) -> None:
        """Write ``summary.json`` whole or not at all (a temporary file renamed onto it)."""
        if self.dir is not None:
            replace_file(self.dir / "summary.json", json.dumps(payload, indent=2) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _cut(file: Any, size: int) -> Any:  # noqa: ANN401 - an open text file
    """``file``'s path cut back to ``size`` bytes (its last whole row), reopened for appending."""
    name = file.name
    try:
        file.close()
    except OSError:
        pass  # (its buffer could not be written: dropped)
    with open(name, "r+b") as f:
        f.truncate(size)
    return open(name, "a", newline="")  # noqa: SIM115 - kept open by the recorder


def _fmt(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v)) if math.isfinite(v) else ""
