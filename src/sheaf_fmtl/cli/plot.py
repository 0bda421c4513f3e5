"""``sheaf-fmtl plot``: figures of recorded runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_plot(args: argparse.Namespace) -> int:
    from ..plots import plot_runs
    from ..runtime.run.folder.clearing import check_replaceable
    from ..runtime.run.folder.ledger import record_owned

    if args.out is not None:  # a figure never replaces a file of yours of the same name
        check_replaceable(args.out, _figure_names(args.runs))
    written = plot_runs(args.runs, args.out)
    if args.out is not None:
        record_owned(args.out, [p.name for p in written])
    for path in written:
        print(f"plot: {path}")
    return 0


def _figure_names(runs: list[str]) -> list[str]:
    """Every file name ``plot`` may write for ``runs`` (:func:`sheaf_fmtl.plots.plot_runs`)."""
    from ..plots.style import FORMATS

    names = [Path(r).name for r in runs] + [f"{i}_{Path(r).name}" for i, r in enumerate(runs)]
    per_run = [f"{kind}_{n}" for kind in ("map_norms", "edge_weights") for n in names]
    stems = ["metric_vs_rounds_and_bits", *per_run]
    return [f"{stem}.{fmt}" for stem in stems for fmt in FORMATS]


def add_plot_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("plot", help="plot recorded runs")
    p.add_argument("runs", nargs="+", help="run folders")
    p.add_argument("--out", help="folder for the figures (default, for a single run: its folder)")
    p.set_defaults(func=cmd_plot)
