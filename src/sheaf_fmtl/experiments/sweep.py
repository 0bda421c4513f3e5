"""``sheaf-fmtl sweep CONFIG --grid KEY=VALUES ...``: grid search on a validation split.

Every combination of the grid runs with ``validation = v`` (a fraction of each client's training
data held out by the data protocol and evaluated instead of the test split, which is never read),
into ``OUT/cells/KEY=VALUE,...``; a cell whose folder already holds a finished summary of the same
config is reused. The cells are ranked by their final validation metric (accuracy: higher is
better; MSE: lower; your own metric: as config key ``metric_goal`` says), and the best
configuration is written as ``OUT/best.yaml`` (its keys that differ from the defaults, with
``dataset``, ``algorithm`` and the swept keys, never ``validation``: ``sheaf-fmtl run
OUT/best.yaml``, ``reproduce --tuned``), with the ranking in ``OUT/sweep.csv``.

Grid values: ``a:b:logN`` (``N`` log-spaced values from ``a`` to ``b``), ``a:b:linN`` (``N``
evenly spaced), or a comma list (``0.01,0.05``, ``gaussian,orthogonal``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..commandline import config_keys
from ..config import ConfigError, RunConfig, load_config, read_config_file
from ..config.files import replace_file
from ..config.usage import UnusedKeysWarning
from ..plugins import higher_is_better
from ..runtime.run.folder.ledger import record_owned
from ..runtime.run.folder.rundir import claim
from ..runtime.run.stopping.interrupt import StopRequest, signalled, stopped_status
from ..spelling import option, setting
from .cells import finished, run_folder
from .grid import apply_point, cell_name, grid_points, parse_grid


@dataclass
class CellResult:
    point: dict[str, Any]
    folder: Path
    summary: dict[str, Any]
    reused: bool = False

    @property
    def value(self) -> float | None:
        return self.summary.get("final") if self.summary.get("status") == "ok" else None


def run_cell(config: RunConfig, folder: Path, fed: Any = None) -> dict[str, Any]:
    """Run one grid point into ``folder`` (:func:`.cells.run_folder`: a refused configuration or a
    divergence is recorded, not raised)."""
    return run_folder(config, folder, {"sweep": True}, fed)


_DATA_KEYS = (
    "dataset",
    "clients",
    "seed",
    "data_dir",
    "data",
    "standardize",
    "validation",
    "model",
    "l2",
    "device",
)


class _FederationCache:
    """The last federation built, reused while the data-defining keys stay the same."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.fed: Any = None

    def get(self, config: RunConfig) -> Any:
        from ..federation import build_federation
        from ..runtime.engine.simulate import load_dataset, resolve_device

        key = json.dumps({k: getattr(config, k) for k in _DATA_KEYS}, sort_keys=True, default=str)
        if key != self.key:
            data = load_dataset(config)
            device = resolve_device(config.device)
            self.fed = build_federation(data, config.model, l2=config.l2, device=device)
            self.key = key
        return self.fed


@dataclass
class SweepResult:
    ranked: list[CellResult]
    metric: str
    best: RunConfig | None
    best_path: Path | None
    stopped: bool = False  # a signal stopped it: the ranking holds the cells finished so far


def sweep(
    base: RunConfig,
    grid: dict[str, list[Any]],
    out: str | Path,
    validation: float = 0.2,
    log: Callable[[str], None] = print,
) -> SweepResult:
    """Run every grid point of ``base`` on a ``validation`` split into ``out`` and rank them.

    Args:
        base: the configuration every point starts from (its own ``validation`` is replaced).
        grid: ``{key: values}`` (:func:`parse_grid`).
        out: the sweep folder (``cells/``, ``sweep.csv``, ``best.yaml``).
        validation: the fraction of each client's training data held out, in (0, 1).
        log: where progress lines go.
    Returns:
        The cells ranked best first, the metric, and the best config (``None`` if no cell finished).
    """
    if not 0.0 < validation < 1.0:
        raise ConfigError(
            f"{option('validation', validation)} is out of range; sweep needs 0 < validation < 1 "
            f"(e.g. {option('validation', 0.2)})"
        )
    if higher_is_better(base.metric_goal, base.metric, "accuracy") is None:  # only a user metric can be
        raise ConfigError(
            f"sweep ranks the cells by config key 'metric' = '{base.metric}', but does not know whether a "
            f"higher value is better: add {setting('metric_goal', 'max')} or {setting('metric_goal', 'min')} "
            "(or give the function an attribute higher_is_better = True/False)"
        )
    out = Path(out)
    points = grid_points(grid)
    configs = [apply_point(base, p, validation=validation, save_maps=False) for p in points]
    with claim(out, reuse=True, kind="sweep"):  # new, empty, or an earlier sweep's
        log(
            f"sweep: {len(points)} cells on a validation split of {validation:g} of each client's "
            f"training data, into {out}/cells/"
        )
        with warnings.catch_warnings():  # save_maps=false on every cell is the sweep's, not the user's
            warnings.simplefilter("ignore", UnusedKeysWarning)  # (each cell's config.yaml lists it)
            cells, stopped = _run_cells(points, configs, out, log)
        metric = next((c.summary["metric"] for c in cells if "metric" in c.summary), "accuracy")
        higher = next((c.summary["higher_is_better"] for c in cells if "higher_is_better" in c.summary), None)
        if higher is None:  # cells of a version before the key: the built-in metrics
            higher = metric == "accuracy"
        ranked = rank([c for c in cells if c.summary.get("status") != "interrupted"], higher)
        record_owned(out, ["sweep.csv", "best.yaml"])  # the sweep's: --overwrite of the folder clears them
        _write_csv(out / "sweep.csv", ranked, list(grid), metric)
        best, best_path = _best(base, grid, ranked, out, metric, validation) if not stopped else (None, None)
    return SweepResult(ranked, metric, best, best_path, stopped)


def _run_cells(
    points: list[dict[str, Any]], configs: list[RunConfig], out: Path, log: Callable[[str], None]
) -> tuple[list[CellResult], bool]:
    """Every cell in turn (a finished one reused); stops after the cell a signal reached."""
    cache, cells, ran = _FederationCache(), list[CellResult](), list[float]()
    for i, (point, config) in enumerate(zip(points, configs, strict=True), 1):
        folder = out / "cells" / cell_name(point)
        t0 = time.perf_counter()
        summary = finished(folder, config)
        reused = summary is not None
        if summary is None:
            if signalled():
                return cells, True
            reused_data = cache.get(config) if config.processes == 1 else None  # (ranks read their own)
            summary = run_cell(config, folder, reused_data)
        cell = CellResult(point, folder, summary, reused)
        cells.append(cell)
        if not reused:
            ran.append(time.perf_counter() - t0)
        how = "reused" if reused else f"{ran[-1]:.1f} s"
        if ran and i < len(points):  # the cells run so far, their mean time over those left
            how += f"; about {sum(ran) / len(ran) * (len(points) - i):.0f} s left"
        log(f"[{i}/{len(points)}] {cell_name(point)}: {_describe(cell)} ({how})")
        if summary.get("status") == "interrupted" or signalled():
            return cells, True
    return cells, False


def _best(
    base: RunConfig,
    grid: dict[str, list[Any]],
    ranked: list[CellResult],
    out: Path,
    metric: str,
    validation: float,
) -> tuple[RunConfig | None, Path | None]:
    """``best.yaml`` from the best cell, if any finished."""
    best = best_path = None
    if ranked and ranked[0].value is not None:
        best = apply_point(base, ranked[0].point, validation=0.0)
        best_path = out / "best.yaml"
        note = f"validation {metric} {ranked[0].value:.4f}, {validation:g} held out"
        _write_best(best, list(grid), best_path, note)
    return best, best_path


def rank(cells: list[CellResult], higher_is_better: bool) -> list[CellResult]:
    """Finished cells best first (descending when ``higher_is_better``: accuracy; else ascending:
    MSE), then the others, each in grid order."""
    sign = -1.0 if higher_is_better else 1.0
    done = [c for c in cells if c.value is not None]
    return sorted(done, key=lambda c: sign * float(c.value)) + [c for c in cells if c.value is None]  # type: ignore[arg-type]


def _describe(cell: CellResult) -> str:
    s = cell.summary
    if cell.value is not None:
        return f"validation {s.get('metric', 'metric')} {cell.value:.4f}"
    return f"{s.get('status', 'failed')}: {s.get('message', '')}".rstrip(": ")


def _write_csv(path: Path, ranked: list[CellResult], keys: list[str], metric: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(["rank", *keys, f"validation_{metric}", "status", "folder"])
    for i, c in enumerate(ranked, 1):
        w.writerow(
            [
                i,
                *(c.point[k] for k in keys),
                "" if c.value is None else c.value,
                c.summary.get("status"),
                c.folder.name,
            ]
        )
    replace_file(path, text.getvalue())


def _write_best(config: RunConfig, swept: list[str], path: Path, note: str) -> None:
    """The keys of ``config`` that differ from the defaults, plus ``dataset``, ``algorithm`` and the
    swept keys (so that, given to ``reproduce``, a swept value equal to the default still applies);
    never ``validation``."""
    default = RunConfig().to_dict()
    keep = {"dataset", "algorithm", *(k.split(".")[0] for k in swept)}
    items = config.to_dict().items()
    mapping = {k: v for k, v in items if (k in keep or v != default[k]) and k != "validation"}
    replace_file(path, f"# sheaf-fmtl sweep: best cell ({note})\n" + yaml.safe_dump(mapping, sort_keys=False))


def format_ranking(result: SweepResult, keys: list[str]) -> str:
    """The ranked table as aligned text."""
    head = ["rank", *keys, f"validation {result.metric}", "status"]
    rows = [
        [
            str(i),
            *(str(c.point[k]) for k in keys),
            "" if c.value is None else f"{c.value:.4f}",
            str(c.summary.get("status")),
        ]
        for i, c in enumerate(result.ranked, 1)
    ]
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
    lines = ("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in [head, *rows])
    return "\n".join(line.rstrip() for line in lines)


def _gives_validation(args: argparse.Namespace) -> bool:
    """Whether the command line's ``--set`` or its config file names ``validation`` (0 given on
    purpose, not the default)."""
    if any(s.split("=", 1)[0].strip() == "validation" for s in args.set or []):
        return True
    return bool(args.config) and "validation" in read_config_file(Path(args.config))


def cmd_sweep(args: argparse.Namespace) -> int:
    base = load_config(args.config, args.set, config_keys(args))
    grid = parse_grid(args.grid)
    if args.validation is None and base.validation == 0 and _gives_validation(args):
        raise ConfigError(
            f"{setting('validation', 0)}: a sweep ranks its cells on a validation split, 0 < validation < 1; "
            "give --validation 0.2 (its default), or leave validation out"
        )
    validation = args.validation if args.validation is not None else (base.validation or 0.2)
    out = (
        Path(args.out)
        if args.out
        else Path("runs") / "sweep" / f"{base.dataset}-{base.algorithm}".replace(":", "_").replace("/", "_")
    )
    with StopRequest() as stop:  # a signal: the current cell stops, then the sweep
        result = sweep(base, grid, out, validation, log=(lambda _: None) if args.quiet else print)
    print(format_ranking(result, list(grid)))
    if result.stopped or stop.signum:
        return stopped_status(stop.signum or signalled() or signal.SIGINT, "sweep", out)
    if result.best is None:
        why = next((c.summary["message"] for c in result.ranked if c.summary.get("message")), None)
        first = f" (first: {why})" if why else ""
        print(f"sweep: no cell finished{first}; see {out}/sweep.csv", file=sys.stderr)
        return 1
    best = ", ".join(f"{k}={v}" for k, v in result.ranked[0].point.items())
    print(f"best: {best} (validation {result.metric} {result.ranked[0].value:.4f})")
    print(f"best config: {result.best_path} (sheaf-fmtl run {result.best_path}); ranking: {out}/sweep.csv")
    return 0
