"""Cells of a reproduction: one (experiment, dataset, setting, seed) run folder with a stable name.

A cell whose folder holds a ``summary.json`` with a final status and a ``cell.json`` with the cell's
config is reused; anything else (no folder, an interrupted run, another config) is run again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import RunConfig, from_mapping, parse_overrides, renamed_keys, save_config
from ..config.defaults import default_lam
from ..config.files import replace_file
from ..config.schema import dict_keys
from ..data.bounded import read_text_bounded
from ..metrics.aggregate import FINISHED, read_summary
from .paper import COMMON, DATASET_BASE, QUICK, Experiment, Setting

#: Keys a ``--tuned`` YAML (``sheaf-fmtl sweep``'s ``best.yaml``) sets: step sizes and regularisation
#: only, so the experiment keeps its own rounds, graph, clients and settings.
TUNED_KEYS = (
    "lam",
    "alpha",
    "eta",
    "l2",
    "map_scale",
    "inner_lr",
    "inner_steps",
    "pfedme_beta",
    "perfedavg_beta",
)
#: Statuses that end a cell for good: the same config gives them again.
DONE = (*FINISHED, "diverged", "refused")
#: Keys that do not change a run's numbers (not compared when reusing a cell).
IGNORED_KEYS = ("device", "data_dir", "data_search")
#: Written into a cell's folder once it is done: the cell's config (``run`` may record a resolved one).
CELL_FILE = "cell.json"


@dataclass(frozen=True)
class Cell:
    experiment: str
    dataset: str  # the paper's dataset name (the table's row), whatever the config runs
    setting: Setting
    seed: int
    config: RunConfig

    def folder(self, root: str | Path) -> Path:
        """``ROOT/cells/EXPERIMENT/DATASET/SETTING/seedS``."""
        return Path(root) / "cells" / self.experiment / self.dataset / self.setting.slug / f"seed{self.seed}"


def cell_config(
    exp: Experiment,
    dataset: str,
    setting: Setting,
    seed: int,
    *,
    quick: bool = False,
    tuned: Sequence[Mapping[str, Any]] = (),
    overrides: Sequence[str] = (),
    substitute: Mapping[str, Mapping[str, Any]] | None = None,
) -> RunConfig:
    """The config of one cell, from (later wins): our common keys, the dataset's keys, ``tuned``
    YAMLs that match its dataset and algorithm, the experiment's per-dataset keys, the setting,
    ``--quick``'s keys, ``substitute[dataset]`` (tests: a generated dataset) and ``--set`` items.

    Raises:
        ConfigError: a bad key or value.
    """
    algorithm = setting.overrides.get("algorithm", "sheaf-fmtl")
    mapping: dict[str, Any] = {"dataset": dataset, **COMMON, **DATASET_BASE.get(dataset, {})}
    for t in tuned:
        if t.get("dataset", dataset) == dataset and t.get("algorithm", algorithm) == algorithm:
            mapping.update({k: v for k, v in t.items() if k in TUNED_KEYS})
    mapping.update(exp.per_dataset.get(dataset, {}))
    mapping.update(setting.overrides)
    mapping["save_maps"] = False  # a paper-scale map stack is ~12 GB; the norms are kept (--set wins)
    if quick:
        mapping.update({**QUICK.get(dataset, {}), **exp.quick})
    if substitute and dataset in substitute:
        mapping.update(substitute[dataset])
    for key, value in parse_overrides(list(overrides)).items():
        if key in dict_keys() and isinstance(value, dict):
            mapping[key] = {**mapping.get(key, {}), **value}
        else:
            mapping[key] = value
    mapping["seed"] = seed
    return from_mapping(mapping)


def _key(config: RunConfig) -> dict[str, Any]:
    return {k: v for k, v in config.to_dict().items() if k not in IGNORED_KEYS}


def finished(folder: str | Path, config: RunConfig) -> dict[str, Any] | None:
    """The summary in ``folder`` when it holds a final run of ``config`` (a final ``summary.json``
    and a ``cell.json`` with the same config, ``IGNORED_KEYS`` aside; ``cell.json`` is written last,
    so an interrupted run is not finished); ``None`` otherwise."""
    folder = Path(folder)
    summary = read_summary(folder)
    if summary is None or summary.get("status") not in DONE:
        return None
    try:
        saved = json.loads(read_text_bounded(folder / CELL_FILE))
    except (OSError, json.JSONDecodeError):
        return None
    return summary if _same_config(saved.get("config"), config) else None


def _same_config(saved: Any, config: RunConfig) -> bool:
    """``saved`` (a cell's recorded config) is ``config``'s; a key the library gained since the cell
    ran counts as the same when ``config`` leaves it at its default (the run it records is the same)."""
    want = json.loads(json.dumps(_key(config)))
    if not isinstance(saved, dict):
        return False
    saved = renamed_keys(saved)
    defaults = json.loads(json.dumps(_key(RunConfig())))
    new = {k for k in want.keys() - saved.keys() if want[k] == defaults.get(k)}
    return bool({k: v for k, v in want.items() if k not in new} == saved)


def run_folder(
    config: RunConfig, folder: str | Path, marker: Mapping[str, Any], fed: Any = None
) -> dict[str, Any]:
    """Run ``config`` into ``folder`` (cleared first) and mark it finished with ``cell.json``
    (``marker`` and the config). A refused configuration (``ValueError``: the stability check, bad
    maps) or a divergence is recorded in ``summary.json`` instead of stopping the caller; an
    interrupted run (``status = interrupted``) is not marked. ``fed``: a federation to reuse."""
    from ..runtime.run.folder.rundir import claim
    from ..runtime.run.launching.launch import refuse_in_a_rank
    from ..runtime.run.stopping.interrupt import leave_summary

    refuse_in_a_rank()  # (before the folder is touched)
    folder = Path(folder)
    with claim(folder, overwrite=True), leave_summary(folder):  # a folder sheaf-fmtl wrote, or a new one
        (folder / CELL_FILE).unlink(missing_ok=True)
        return _run_in(config, folder, marker, fed)


def _stopped_run_of(config: RunConfig, folder: Path) -> bool:
    """``folder`` holds a run of ``config`` stopped by a signal (it can be resumed)."""
    from ..runtime.run.checkpoints.integrity import RESUMABLE_KEYS, resumable_keys, run_config

    summary = read_summary(folder) or {}
    if summary.get("status") != "interrupted":
        return False
    keys = _key(config)
    may = resumable_keys(keys)  # (run_config leaves out the same keys, importing nothing the folder names)
    saved = run_config(folder, kept=[k for k in RESUMABLE_KEYS if k not in may])
    want = {k: v for k, v in keys.items() if k not in may}
    if saved is not None and config.clients is None:
        saved["clients"] = None  # (config.yaml records the dataset's own number)
    # config.yaml records the coupling that ran: maps = auto and lam = null as they were resolved
    if (
        saved is not None
        and config.algorithm == "sheaf-fmtl"
        and config.maps == "auto"
        and summary.get("maps_auto")
    ):
        want["maps"] = saved.get("maps")  # the stopped run chose its maps itself
    if saved is not None and config.lam is None:  # lam as the stopped run resolved it
        if summary.get("lam_rule"):  # by a rule of the graph, maps and data: as recorded
            want["lam"] = saved.get("lam")
        else:  # the mode's or the algorithm's fixed default
            want["lam"] = default_lam(config.replace(maps=want.get("maps", config.maps)))
    return bool(saved == json.loads(json.dumps(want, default=str)))


def _run_in(config: RunConfig, folder: Path, marker: Mapping[str, Any], fed: Any) -> dict[str, Any]:
    from ..runtime.engine.simulate import DivergenceError, build_simulation
    from ..runtime.run.checkpoints.integrity import CheckpointError
    from ..runtime.run.folder.clearing import clear
    from ..runtime.run.folder.folderlock import FolderError
    from ..runtime.run.launching.launch import Resume, launch, summary_of
    from ..runtime.run.launching.resume import RESUMABLE_KEYS

    try:
        if _stopped_run_of(config, folder):  # continue it where it stopped, over as many processes
            keys = {k: getattr(config, k) for k in RESUMABLE_KEYS}
            summary = summary_of(launch(Resume(keys=keys), folder, progress=False)) or {}
        else:  # in the layout `sheaf-fmtl run` gives it (processes = K: its ranks)
            sim = None if fed is None else build_simulation(config, fed=fed)
            summary = summary_of(launch(config, folder, progress=False, overwrite=True, sim=sim)) or {}
    except DivergenceError:
        summary = read_summary(folder) or {"status": "diverged"}
    except (FolderError, CheckpointError):
        raise  # a folder or a stopped run's checkpoint that cannot be used: said in one line
    except ValueError as e:
        clear(folder)  # (what an earlier run of this cell left)
        save_config(config, folder / "config.yaml")
        summary = {
            "algorithm": config.algorithm,
            "dataset": config.dataset,
            "seed": config.seed,
            "status": "refused",
            "final": None,
            "message": str(e),
        }
        replace_file(folder / "summary.json", json.dumps(summary, indent=2) + "\n")
    if summary.get("status") in DONE:
        replace_file(folder / CELL_FILE, json.dumps({**marker, "config": _key(config)}, indent=2) + "\n")
    return summary


def is_done(cell: Cell, folder: str | Path) -> bool:
    """``folder`` (the cell's) holds a finished run of the cell's config (:func:`finished`)."""
    return finished(folder, cell.config) is not None


def run_cell(cell: Cell, folder: str | Path) -> dict[str, Any]:
    """Run one cell into ``folder`` (:func:`run_folder`) and mark it done."""
    marker = {
        "experiment": cell.experiment,
        "dataset": cell.dataset,
        "setting": cell.setting.slug,
        "seed": cell.seed,
    }
    return run_folder(cell.config, folder, marker)
