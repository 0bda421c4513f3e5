"""``sheaf-fmtl reproduce`` and ``sheaf-fmtl table`` (registered by the main CLI through
:func:`add_parser`), and :func:`run_seeds`, behind ``sheaf-fmtl run --seeds 0,1,2``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cli_options import add_config_options, config_keys
from ..config import ConfigError, RunConfig, read_config_file
from ..metrics.aggregate import write_aggregate
from .paper import EXPERIMENTS
from .table import group_runs, render, table_spec


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` -> seeds; ConfigError for anything else."""
    try:
        if "-" in text and "," not in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: give seeds as 0,1,2 or 0-4") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: give distinct seeds >= 0, as 0,1,2 or 0-4")
    return seeds


def run_seeds(
    config: RunConfig, seeds: Sequence[int], out: str | Path, *, progress: bool = True
) -> dict[str, Any]:
    """Run ``config`` once per seed into ``out/seedS`` (a seed whose folder already holds a
    finished run of the same config is reused), then write ``out/aggregate.json`` and
    ``out/aggregate.md`` (mean, standard error, per-seed values). Returns the aggregate."""
    from .cells import Cell, is_done, run_cell
    from .paper import Setting

    root = Path(out)
    folders = []
    for seed in seeds:
        cell = Cell("run", config.dataset, Setting("", "", {}), seed, config.replace(seed=seed))
        folder = root / f"seed{seed}"
        folders.append(folder)
        if is_done(cell, folder):
            continue
        if progress:
            print(f"seed {seed} -> {folder}")
        if run_cell(cell, folder).get("status") == "interrupted":
            break
    return write_aggregate([f for f in folders if (f / "summary.json").is_file()], root)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from .reproduce import reproduce

    keys = config_keys(args)
    overrides = [*args.set, *(f"{k}={v}" for k, v in keys.items())]
    tuned = [read_config_file(p) for p in args.tuned]
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
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    md, csv = render(group_runs(args.runs), table_spec(args.title), Path(args.out) / args.name)
    print(md.read_text(), end="")
    print(f"wrote {md} and {csv}")
    return 0


def add_parser(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private type
    """Add ``reproduce`` and ``table`` to the main CLI's sub-parsers."""
    p = subparsers.add_parser(
        "reproduce", help="run one of the paper's experiments, tables beside the paper's"
    )
    p.add_argument("name", choices=[*EXPERIMENTS, "all"], help="experiment")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 5; 2 with --quick)")
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
    t.add_argument("--out", default=".", help="folder of NAME.md and NAME.csv (default: here)")
    t.add_argument("--name", default="table", help="file name stem (default: table)")
    t.add_argument("--title", default="Runs", help="table title")
    t.set_defaults(func=cmd_table)
