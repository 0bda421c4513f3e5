"""``sheaf-fmtl reproduce NAME``: run one of the paper's experiments cell by cell, then write
``DIR/NAME.md``, ``DIR/NAME.csv`` (ours beside the paper's) and the figures under ``DIR/figures``.

Finished cells are reused (:func:`.cells.is_done`), so an interrupted reproduction continues and
the tables can be rebuilt from what exists. A dataset whose files are missing gives a row
"data not present: how to obtain it" instead of cells.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import spelling
from ..config import ConfigError, parse_overrides
from ..config.usage import UnusedKeysWarning
from ..data.base import DatasetError
from ..data.files import ENV_VAR, HOW_TO_GET, search_dirs, try_find
from ..data.registry import dataset_files
from ..progress import bar
from ..runtime.run.folder.ledger import record_owned
from ..runtime.run.folder.rundir import check_out_dir, claim
from ..runtime.run.stopping.interrupt import signalled
from .cells import DONE, Cell, cell_config, is_done, run_cell
from .paper import EXPERIMENTS, QUICK_SEEDS, Experiment, experiment
from .table import Row, render

DEFAULT_SEEDS = 5
#: The most seeds ``--seeds`` takes (``run --seeds`` and ``reproduce``: each seed is whole runs,
#: and the cells are planned before any runs).
MAX_SEEDS = 1000


def seed_count(seeds: int | None, default: int) -> int:
    """``--seeds N`` (seeds ``0 .. N-1``), ``default`` when not given; ConfigError, before any run,
    for a count below 1 or above :data:`MAX_SEEDS`."""
    n = default if seeds is None else seeds
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SEEDS:
        raise ConfigError(
            f"{spelling.option('seeds', n)}: give a number of seeds from 1 to {MAX_SEEDS} (seeds 0 .. N-1), "
            f"e.g. {spelling.option('seeds', 3)}"
        )
    return n


def data_present(dataset: str, data_dir: str = "", search: bool = False) -> bool:
    """Whether a file-based dataset's files are found where a run with ``data_dir`` (and
    ``data_search``) would look (generated datasets always are)."""
    files = dataset_files().get(dataset)
    return files is None or try_find(files, data_dir or None, search) is not None


def _searched(data_dir: str, search: bool) -> str:
    """The folders a run looks in, for a message (``$SHEAF_FMTL_DATA`` named when it is unset)."""
    dirs = [str(d) for d in search_dirs(data_dir or None, search)]
    if (search or not data_dir) and not os.environ.get(ENV_VAR):
        dirs.insert(len(dirs) - 1, f"${ENV_VAR} (not set)")
    return ", ".join(dirs)


def missing_note(dataset: str, data_dir: str = "", search: bool = False) -> str:
    """The visible row text for a dataset whose files are missing: where they were looked for
    and how to obtain them."""
    how = HOW_TO_GET.get(dataset, "see data/DATA.md")
    fetch = (
        f"`sheaf-fmtl data fetch {dataset} --dest {data_dir}`"
        if data_dir
        else f"`sheaf-fmtl data fetch {dataset} --dest DIR`, then {spelling.setting('data_dir', 'DIR')} "
        f"or {ENV_VAR}=DIR"
    )
    return f"data not present: how to obtain it: {how} (e.g. {fetch}); searched {_searched(data_dir, search)}"


def no_data_error(
    command: str, datasets: Sequence[str], data_dir: str = "", search: bool = False
) -> DatasetError:
    """The one-line refusal of a command none of whose datasets has its files (nothing ran)."""
    names = ", ".join(datasets)
    describe = "(`sheaf-fmtl data describe NAME` lists the files)"
    flag = spelling.setting("data_dir", "DIR")
    fetch = (
        f"`sheaf-fmtl data fetch NAME --dest {data_dir}` {describe}"
        if data_dir
        else f"`sheaf-fmtl data fetch NAME --dest DIR` {describe}, then pass {flag} or set {ENV_VAR}=DIR"
    )
    return DatasetError(
        f"{command}: no data for {names} (searched {_searched(data_dir, search)}), so nothing ran and "
        f"nothing was written; get them with {fetch}, or choose datasets that are there with "
        f"{spelling.option('datasets')}"
    )


def plan(
    exp: Experiment,
    seeds: Sequence[int],
    *,
    datasets: Sequence[str] | None = None,
    quick: bool = False,
    overrides: Sequence[str] = (),
    tuned: Sequence[Mapping[str, Any]] = (),
    substitute: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[Cell], dict[str, str]]:
    """Every cell of ``exp`` on ``datasets`` (default: all of its datasets) and the notes of the
    datasets that cannot run (missing files). Raises ValueError for a dataset not in ``exp``."""
    chosen = list(exp.datasets) if not datasets else list(datasets)
    unknown = [d for d in chosen if d not in exp.datasets]
    if unknown:
        raise ValueError(f"{exp.name} has no dataset {unknown[0]!r}; its datasets: {', '.join(exp.datasets)}")
    cells: list[Cell] = []
    missing: dict[str, str] = {}
    for ds in chosen:
        for setting in exp.settings:
            for seed in seeds:
                cfg = cell_config(
                    exp,
                    ds,
                    setting,
                    seed,
                    quick=quick,
                    tuned=tuned,
                    overrides=overrides,
                    substitute=substitute,
                )
                if not data_present(cfg.dataset, cfg.data_dir, cfg.data_search):
                    missing[ds] = missing_note(cfg.dataset, cfg.data_dir, cfg.data_search)
                    break
                cells.append(Cell(exp.name, ds, setting, seed, cfg))
            if ds in missing:
                break
    return [c for c in cells if c.dataset not in missing], missing


def estimate_seconds(pending: Sequence[Cell]) -> float:
    """Rough time of ``pending``: per dataset, build the first cell's simulation and time one round
    (the faster of two), then ``build + rounds * round * (1 + 1 / eval_every)`` per cell."""
    from ..runtime.engine.simulate import build_simulation

    per_dataset: dict[str, tuple[float, float]] = {}
    total = 0.0
    for cell in pending:
        if cell.dataset not in per_dataset:
            t0 = time.perf_counter()
            try:
                sim = build_simulation(cell.config)
            except ValueError:  # refused at build time: costs about nothing
                per_dataset[cell.dataset] = (0.0, 0.0)
                continue
            build = time.perf_counter() - t0
            steps = []
            for _ in range(2):
                t1 = time.perf_counter()
                sim.step()
                steps.append(time.perf_counter() - t1)
            per_dataset[cell.dataset] = (build, min(steps))
            del sim
        build, step = per_dataset[cell.dataset]
        cfg = cell.config
        total += build + cfg.rounds * step * (1.0 + 1.0 / cfg.eval_every)
    return total


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def reproduce(
    name: str,
    out: str | Path,
    *,
    seeds: int | None = None,
    quick: bool = False,
    datasets: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    tuned: Sequence[Mapping[str, Any]] = (),
    substitute: Mapping[str, Mapping[str, Any]] | None = None,
    progress: bool = True,
    estimate: bool = True,
    figures: bool = True,
) -> list[Path]:
    """Run experiment ``name`` (or ``all``) into ``out``; returns the tables and figures written.

    Args:
        name: a key of :data:`.paper.EXPERIMENTS` or ``all``.
        out: the reproduction folder (cells under ``out/cells``).
        seeds: seeds ``0 .. seeds-1`` (default 5, or :data:`.paper.QUICK_SEEDS` with ``quick``).
        quick: the ``--quick`` sizes of :data:`.paper.QUICK`.
        datasets: restrict to these of the experiment's datasets (``all``: of each experiment).
        overrides: ``KEY=VALUE`` items applied to every cell last.
        tuned: ``sweep`` YAMLs (mappings), applied to the cells of their dataset and algorithm.
        substitute: per paper dataset, config keys replacing it (tests: a generated dataset).
        progress: progress bar over cells; estimate: time one round per dataset first;
        figures: draw the experiment's figures (the tables are always written).
    """
    names = list(EXPERIMENTS) if name == "all" else [experiment(name).name]
    n_seeds = seed_count(seeds, QUICK_SEEDS if quick else DEFAULT_SEEDS)  # (before any cell is planned)
    known = {d for n in names for d in EXPERIMENTS[n].datasets}
    if datasets and name == "all" and not set(datasets) <= known:
        bad = sorted(set(datasets) - known)[0]
        raise ValueError(f"no experiment has dataset {bad!r}; datasets: {', '.join(sorted(known))}")
    check_out_dir(out, reuse=True, kind="reproduce")  # a folder it may not write: said before the data
    plans = _plans(
        names,
        range(n_seeds),
        datasets,
        of_all=name == "all",
        quick=quick,
        overrides=overrides,
        tuned=tuned,
        substitute=substitute,
    )
    if not any(cells for _, cells, _ in plans):  # every dataset asked lacks its files
        absent = list(dict.fromkeys(ds for _, _, missing in plans for ds in missing))
        raise no_data_error(f"reproduce {name}", absent, *data_keys(overrides))
    with claim(Path(out), reuse=True, kind="reproduce"):  # new, empty, or an earlier reproduction's
        written: list[Path] = []
        for exp, cells, missing in plans:
            stopped, paths = _run_experiment(
                exp, cells, missing, Path(out), progress=progress, estimate=estimate, figures=figures
            )
            written += paths
            _record_written(paths, Path(out))
            if stopped:
                break
        return written


def _plans(
    names: Sequence[str], seeds: range, datasets: Sequence[str] | None, *, of_all: bool, **keys: Any
) -> list[tuple[Experiment, list[Cell], dict[str, str]]]:
    """Each experiment of ``names`` with its cells (:func:`plan`, given ``keys``) and its datasets
    whose files are missing; of ``all`` experiments (``of_all``), each on those of ``datasets``
    that are its own, and none that has none of them."""
    plans = []
    for exp in (EXPERIMENTS[n] for n in names):
        chosen = [d for d in exp.datasets if d in datasets] if (datasets and of_all) else datasets
        if of_all and datasets and not chosen:
            continue
        cells, missing = plan(exp, seeds, datasets=chosen, **keys)
        plans.append((exp, cells, missing))
    return plans


def _record_written(paths: Sequence[Path], top: Path) -> None:
    """Each of ``paths`` inside ``top`` in its folder's ledger, and each new top-level name in
    ``top``'s (the tables and figures of a reproduction: ``--overwrite`` of the folder clears them)."""
    for q in paths:
        if q.is_relative_to(top):
            record_owned(q.parent, [q.name])
            record_owned(top, [q.relative_to(top).parts[0]])


def data_keys(overrides: Sequence[str]) -> tuple[str, bool]:
    """``data_dir`` and ``data_search`` as ``overrides`` (``--set`` items and ``--data-dir``) give
    them to every cell; ``("", False)`` when they do not."""
    keys = parse_overrides(list(overrides))
    return str(keys.get("data_dir") or ""), bool(keys.get("data_search", False))


def _run_experiment(
    exp: Experiment,
    cells: Sequence[Cell],
    missing: Mapping[str, str],
    out: Path,
    *,
    progress: bool,
    estimate: bool,
    figures: bool,
) -> tuple[bool, list[Path]]:
    pending = [c for c in cells if not is_done(c, c.folder(out))]
    for ds, note in missing.items():
        tqdm.write(f"{exp.name} / {ds}: {note}")
    expected = f", expected time about {_duration(estimate_seconds(pending))}" if estimate and pending else ""
    tqdm.write(
        f"{exp.name}: {len(cells)} cells, {len(cells) - len(pending)} already done, "
        f"{len(pending)} to run{expected}"
    )
    stopped = False
    with warnings.catch_warnings():  # the grid's keys are ours (save_maps=false for every cell, ...);
        warnings.simplefilter("ignore", UnusedKeysWarning)  # each cell's config.yaml lists the unused
        for cell in bar(pending, desc=exp.name, unit="cell", enabled=progress):
            if signalled() or run_cell(cell, cell.folder(out)).get("status") == "interrupted" or signalled():
                tqdm.write(f"{exp.name}: interrupted; run the same command again to continue")
                stopped = True
                break
    return stopped, write_outputs(exp, cells, missing, out, figures=figures)


def _rows(exp: Experiment, cells: Sequence[Cell], missing: Mapping[str, str], out: Path) -> list[Row]:
    rows: list[Row] = []
    datasets = list(dict.fromkeys([*(c.dataset for c in cells), *missing]))
    for ds in [d for d in exp.datasets if d in datasets]:
        if ds in missing:
            rows.append(Row(ds, "(every setting)", "-", note=missing[ds]))
            continue
        for setting in exp.settings:
            done = [
                c.folder(out)
                for c in cells
                if c.dataset == ds and c.setting.slug == setting.slug and is_done(c, c.folder(out))
            ]
            rows.append(
                Row(ds, setting.label, setting.slug, runs=done, paper=exp.paper.get((ds, setting.slug), {}))
            )
    return rows


def write_outputs(
    exp: Experiment, cells: Sequence[Cell], missing: Mapping[str, str], out: Path, *, figures: bool = True
) -> list[Path]:
    """``out/NAME.md``, ``out/NAME.csv`` and, for experiments with figures, the curves (all seeds)
    and map-norm heatmaps of each dataset under ``out/figures/NAME/DATASET``."""
    rows = _rows(exp, cells, missing, out)
    written = list(render(rows, exp, out / exp.name))
    if not (figures and exp.figures):
        return written
    for ds in dict.fromkeys(r.dataset for r in rows if r.runs):
        runs = [p for r in rows if r.dataset == ds for p in r.runs]
        written += draw_figures(runs, out / "figures" / exp.name / ds, heatmaps=exp.heatmaps)
    return written


def draw_figures(runs: Sequence[Path], out: Path, *, heatmaps: bool) -> list[Path]:
    """PNGs of the finished runs: test metric vs rounds and vs bits (all settings, seeds shaded;
    :func:`sheaf_fmtl.plots.curves.metric_figure`) and, with ``heatmaps``, the ``||P_ij||_F``
    heatmap of each setting's first seed."""
    from ..metrics.aggregate import read_summary
    from ..plots.curves import metric_figure
    from ..plots.heatmap import load_map_norms, map_norm_figure
    from ..plots.labels import setting_label
    from ..plots.records import load_run
    from ..plots.style import paper_style, save_figure

    records = [load_run(p) for p in runs if (read_summary(p) or {}).get("status") in DONE[:3]]
    if not records:
        return []
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    configs = [r.config for r in records]
    with paper_style():
        written += save_figure(metric_figure(records), out / "metric_vs_rounds_and_bits", ("png",))
        for rec in records if heatmaps else ():
            maps = load_map_norms(rec.path) if rec.path.name == "seed0" else None
            if maps is not None:  # titled by the setting, not by its cell folder's name
                title = f"{rec.dataset}: " + r"$\|P_{ij}\|_F$" + f"\n{setting_label(rec.config, configs)}"
                written += save_figure(
                    map_norm_figure(*maps, title), out / f"map_norms_{rec.path.parent.name}", ("png",)
                )
    return written
