"""``sheaf-fmtl sweep``'s options, in a module that imports no torch: a command line that misses
``--grid`` is refused at once (the sweep itself, :mod:`.sweep`, is imported to run)."""

from __future__ import annotations

import argparse
from typing import Any

from ..commandline import add_config_options


def cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import cmd_sweep as run

    return run(args)


def add_parser(subparsers: Any) -> None:  # noqa: ANN401 - argparse's private type
    p = subparsers.add_parser("sweep", help="grid search on a validation split; writes the best config")
    p.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=VALUES",
        help="a:b:logN, a:b:linN or a comma list (e.g. lam=1e-5:10:log7, alpha=0.01,0.05); at least one",
    )
    p.add_argument(
        "--validation",
        type=float,
        default=None,
        help="fraction of each client's training data held out (default: the config's, else 0.2)",
    )
    add_config_options(p, out="sweep folder (default runs/sweep/DATASET-ALGORITHM)", overwrite=False)
    p.set_defaults(func=cmd_sweep)
