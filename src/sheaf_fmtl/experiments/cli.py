"""``sheaf-fmtl reproduce`` and ``sheaf-fmtl table`` (registered by the main CLI through
:func:`add_parser`), and :func:`run_seeds`, behind ``sheaf-fmtl run --seeds 0,1,2``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..commandline import add_config_options, config_keys
from ..config import ConfigError, RunConfig, read_config_file
from ..metrics.aggregate import read_summary, write_aggregate
from ..runtime.run.stopping.interrupt import StopRequest, stopped_status
from .paper import EXPERIMENTS, QUICK_SEEDS
from .reproduce import DEFAULT_SEEDS, MAX_SEEDS
from .table import compose, group_runs, render, table_spec


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` -> seeds; ConfigError for anything else (counted before any list
    is made: at most :data:`MAX_SEEDS`)."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            count = hi - lo + 1
            seeds = list(range(lo, hi + 1)) if count <= MAX_SEEDS else []
        else:
            items = text.split(",")
            count = len([x for x in items if x.strip()])
            seeds = [int(x) for x in items if x.strip()] if count <= MAX_SEEDS else []
    except ValueError:
        raise ConfigError(f"--seeds {shown!r}: give seeds as 0,1,2 or 0-4") from None
    if count > MAX_SEEDS:
        raise ConfigError(f"--seeds {shown!r} names {count} seeds; at most {MAX_SEEDS} (each is a whole run)")
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {shown!r}: give distinct seeds >= 0, as 0,1,2 or 0-4")
    return seeds


def run_seeds(
    config: RunConfig, seeds: Sequence[int], out: str | Path, *, progress: bool = True
) -> dict[str, Any]:
    """Run ``config`` once per seed into ``out/seedS`` (a seed whose folder already holds a
    finished run of the same config is reused, one stopped by a signal is resumed), then write
    ``out/aggregate.json`` and ``out/aggregate.md`` (mean, standard error, per-seed values) over
    the seeds finished. ``out`` is new, empty or written by an earlier ``run --seeds``. A signal
    stops after the current seed (:mod:`sheaf_fmtl.runtime.run.stopping.interrupt`). Returns the aggregate."""
    from ..runtime.run.folder.rundir import claim
    from ..runtime.run.stopping.interrupt import signalled
    from .cells import Cell, is_done, run_cell
    from .paper import Setting

    root = Path(out)
    folders = []
    with claim(root, reuse=True, kind="seeds"):
        for seed in seeds:
            cell = Cell("run", config.dataset, Setting("", "", {}), seed, config.replace(seed=seed))
            folder = root / f"seed{seed}"
            folders.append(folder)
            if is_done(cell, folder):
                continue
            if signalled():
                break
            if progress:
                print(f"seed {seed} -> {folder}")
            if run_cell(cell, folder).get("status") == "interrupted" or signalled():
                break
        summaries = {f: read_summary(f) or {} for f in folders}
        done = [f for f, s in summaries.items() if s.get("status") not in (None, "interrupted")]
        aggregate = write_aggregate(done, root)
    refused = [(f, s) for f, s in summaries.items() if s.get("status") == "refused"]
    if refused and len(refused) == len(done):  # nothing ran: say why, as one run would
        why = refused[0][1].get("message", "see its summary.json")
        raise ConfigError(f"run --seeds: every seed refused: {why}")
    for folder, summary in refused:
        print(f"sheaf-fmtl: warning: {folder.name} refused: {summary.get('message')}", file=sys.stderr)
    return aggregate


def cmd_reproduce(args: argparse.Namespace) -> int:
    from .reproduce import reproduce

    keys = config_keys(args)
    overrides = [*args.set, *(f"{k}={v}" for k, v in keys.items())]
    if args.name == "frontier":
        return _frontier(args, overrides)
    tuned = [read_config_file(p) for p in args.tuned]
    with StopRequest() as stop:  # a signal: the current cell stops, then the command
        written = reproduce(
            args.name,
            args.out,
            seeds=args.seeds,
            quick=args.quick,
            datasets=[d for d in args.datasets.split(",") if d] if args.datasets else None,
            overrides=overrides,
            tuned=tuned,
            progress=not args.quiet,
        )
    tables = [p for p in written if p.suffix in (".md", ".csv")]
    print("wrote " + ", ".join(str(p) for p in tables) + f" and {len(written) - len(tables)} figure files")
    return stopped_status(stop.signum, f"reproduce {args.name}", args.out)


def _frontier(args: argparse.Namespace, overrides: list[str]) -> int:
    from .frontier import frontier

    if args.tuned:
        raise ConfigError("reproduce frontier tunes each method's strength itself; --tuned does not apply")
    out = args.out if args.out != "runs/reproduce" else "runs/frontier"
    with StopRequest() as stop:
        written = frontier(
            out,
            problems=[d for d in args.datasets.split(",") if d] if args.datasets else None,
            quick=args.quick,
            seeds=args.seeds,
            overrides=overrides,
            progress=not args.quiet,
        )
    print("wrote " + ", ".join(str(p) for p in written))
    return stopped_status(stop.signum, "reproduce frontier", out)


def cmd_table(args: argparse.Namespace) -> int:
    name = str(args.name)
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise ConfigError(f"--name {shown!r}: give a file name stem without folders (it is written in --out)")
    rows, spec = group_runs(args.runs), table_spec(args.title)
    if args.out is None:  # printed only: files are written where --out says
        print(compose(rows, spec)[0], end="")
        return 0
    stem = (
        Path(args.out) / name
    )  # (replaced only with --overwrite: a file of yours is never replaced unasked)
    there = [p for p in (stem.with_suffix(".md"), stem.with_suffix(".csv")) if p.exists()]
    if there and not args.overwrite:
        raise ConfigError(
            f"{there[0]} exists; add --overwrite to replace it, or give another --out or --name"
        )
    md, csv = render(rows, spec, stem)
    print(md.read_text(), end="")
    print(f"wrote {md} and {csv}")
    return 0


def experiments_help() -> str:
    """``reproduce --help``'s list: each experiment, its data and how many runs it makes."""
    lines = ["experiments:"]
    for exp in EXPERIMENTS.values():
        per_seed = len(exp.datasets) * len(exp.settings)
        lines += [
            f"  {exp.name}: {exp.title}",
            f"    data: {', '.join(exp.datasets)} (files: sheaf-fmtl data describe NAME)",
            f"    runs: {len(exp.settings)} settings x {len(exp.datasets)} datasets x {DEFAULT_SEEDS} "
            f"seeds = {per_seed * DEFAULT_SEEDS} ({per_seed * QUICK_SEEDS} with --quick)",
        ]
    lines += [
        "  all: every experiment above",
        "  frontier: accuracy against bits, the sheaf coupling beside CHOCO-SGD's compressors and",
        "    PowerGossip, strengths tuned on validation (school, vehicle, synthetic-clusters, rmnist;",
        "    --datasets to choose; 3 seeds, 1 with --quick); into runs/frontier unless --out",
        "",
        "time: printed before the runs start (one round timed per dataset); --quick runs comparison on",
        "rmnist in about 9 minutes on 2 cores. Data files are looked for in --data-dir when given, else",
        "in $SHEAF_FMTL_DATA and the user data folder. A dataset whose files are missing is skipped, its",
        "rows saying how to get it; when no dataset asked has its files, nothing runs (exit status 2).",
    ]
    return "\n".join(lines)


def add_parser(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private type
    """Add ``reproduce`` and ``table`` to the main CLI's sub-parsers."""
    p = subparsers.add_parser(
        "reproduce",
        help="run one of the paper's experiments, tables beside the paper's",
        epilog=experiments_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=[*EXPERIMENTS, "all", "frontier"], help="experiment (listed below)")
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help=f"seeds 0..N-1, N from 1 to {MAX_SEEDS} (default {DEFAULT_SEEDS}; {QUICK_SEEDS} with --quick)",
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer rounds, clients and seeds (minutes on 2 cores)"
    )
    p.add_argument("--datasets", default="", help="comma list of the experiment's datasets (default: all)")
    p.add_argument(
        "--tuned",
        action="append",
        default=[],
        metavar="YAML",
        help="a `sheaf-fmtl sweep` result: its keys apply to the cells of its dataset and algorithm",
    )
    add_config_options(
        p,
        config_file=False,
        flags=("data_dir", "device"),
        out="reproduction folder (cells, tables, figures)",
        overwrite=False,
    )
    p.set_defaults(func=cmd_reproduce, out="runs/reproduce")
    t = subparsers.add_parser("table", help="Markdown/CSV table of run folders (seeds grouped)")
    t.add_argument("runs", nargs="+", help="run folders")
    t.add_argument(
        "--out", default=None, help="write NAME.md and NAME.csv into this folder (default: print only)"
    )
    t.add_argument("--name", default="table", help="file name stem (default: table)")
    t.add_argument(
        "--overwrite", action="store_true", help="replace NAME.md and NAME.csv when --out holds them"
    )
    t.add_argument("--title", default="Runs", help="table title")
    t.set_defaults(func=cmd_table)
