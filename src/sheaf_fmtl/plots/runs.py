"""``sheaf-fmtl plot``: the figures of recorded run folders (``metrics.csv``, ``config.yaml``,
``summary.json``, ``checkpoint.pt``), as PNG and PDF."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .curves import metric_figure
from .edge_weights import client_groups, edge_weight_figure, load_edge_weights
from .heatmap import load_map_norms, map_norm_figure
from .labels import object_name, setting_label
from .records import load_run
from .style import FORMATS, check_formats, paper_style, save_figure


def plot_runs(
    run_dirs: Sequence[str | Path], out_dir: str | Path | None = None, formats: Sequence[str] = FORMATS
) -> list[Path]:
    """Draw ``metric_vs_rounds_and_bits`` (all runs; see :func:`.curves.metric_figure`) and one
    ``map_norms_RUN`` heatmap per run with restriction maps, and an ``edge_weights_RUN`` figure per
    run that learned its edge weights (:func:`.edge_weights.edge_weight_figure`), each in every
    format of ``formats``.

    Args:
        run_dirs: run folders.
        out_dir: where the figures go (default: the run folder of a single run; several runs need
            it, so that a comparison never lands inside one of them).
        formats: file formats (``png``, ``pdf`` (vector), ``svg``).

    Returns:
        The paths written.

    Raises:
        FileNotFoundError: a path is not a run folder.
        ValueError: a run has no evaluated round ("nothing to plot: ..."), no run was given, several
            without ``out_dir``, or an unknown format.
    """
    if not run_dirs:
        raise ValueError("nothing to plot: no run folder given")
    if out_dir is None and len(run_dirs) > 1:
        raise ValueError(
            f"plot: {len(run_dirs)} runs compared; give --out DIR for the figures (a single run's go into "
            "its own folder)"
        )
    check_formats(formats)
    records = [load_run(r) for r in run_dirs]  # every run checked before anything is written
    out = Path(out_dir) if out_dir is not None else records[0].path
    for p in [out, *out.parents]:
        if p.exists() and not p.is_dir():
            where = "is" if p == out else f"is under {p}, which is"
            raise ValueError(f"plot --out {out} {where} an existing file; give a folder for the figures")
    out.mkdir(parents=True, exist_ok=True)
    configs = [r.config for r in records]
    written: list[Path] = []
    with paper_style():
        written += save_figure(metric_figure(records), out / "metric_vs_rounds_and_bits", formats)
        names: set[str] = set()
        for i, record in enumerate(records):
            maps, weights = load_map_norms(record.path), load_edge_weights(record.path)
            if maps is None and weights is None:
                continue
            name = record.path.name if record.path.name not in names else f"{i}_{record.path.name}"
            names.add(name)
            about = setting_label(record.config, configs)  # what sets it apart, not its folder's name
            if maps is not None:
                heading = f"{object_name(record.dataset)}: " + r"$\|P_{ij}\|_F$" + f"\n{about}"
                written += save_figure(map_norm_figure(*maps, heading), out / f"map_norms_{name}", formats)
            if weights is not None:  # (also a rival's graph: pfedgraph, dpfl)
                groups = client_groups(record.config, weights["final"].shape[0])
                heading = f"{object_name(record.dataset)}: learned edge weights\n{about}"
                last = int(record.rounds.max()) if len(record.rounds) else None  # (its last evaluation)
                figure = edge_weight_figure(weights, groups, heading, last_round=last)
                written += save_figure(figure, out / f"edge_weights_{name}", formats)
    return written
