"""``sheaf-fmtl demo``: Sheaf-FMTL against local training and dFedU on the built-in problem."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..commandline import add_config_options, config_keys


def cmd_demo(args: argparse.Namespace) -> int:
    """The config's problem (``configs/demo.yaml``: the built-in ``synthetic-clusters``): Sheaf-FMTL
    with learned random maps, Sheaf-FMTL with feature-aware fixed maps and local training on it; for
    ``synthetic-clusters`` also Sheaf-FMTL (fixed shared random maps), dFedU and local training on
    its homogeneous variant. Then one figure (``demo.png``) and ``demo.json``."""
    import torch

    from ..demo import run_demo

    # The demo's models have at most a few dozen parameters: one thread is fastest, and idle
    # worker threads spinning on busy cores slowed its rounds tenfold or more in our runs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_demo(
            args.config,
            args.set,
            Path(args.out),
            quiet=args.quiet,
            overwrite=args.overwrite,
            flags=config_keys(args),
        )
    finally:
        torch.set_num_threads(threads)


def add_demo_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="Sheaf-FMTL vs local training and dFedU on the built-in problem, with plots"
    )
    add_config_options(p, out="output folder (default runs/demo)")
    p.set_defaults(func=cmd_demo, out="runs/demo")
