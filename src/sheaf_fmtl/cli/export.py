"""``sheaf-fmtl export``: a finished run's client models and their preprocessing."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_export(args: argparse.Namespace) -> int:
    from ..export import export

    for path in export(args.run, args.out, model=args.model, round=args.round, programs=not args.no_programs):
        print(f"export: {path}")
    return 0


def add_export_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write a finished run's client models and their preprocessing")
    p.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    p.add_argument(
        "--out", required=True, help="a new or empty folder for client-IIIII.pt(2) and preprocessing.json"
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FUNCTION",
        help="the run's own model, named again (a run folder's code is imported only when named here)",
    )
    p.add_argument(
        "--round",
        choices=("final", "best"),
        default="final",
        help="final: the last checkpoint; best: the best validation evaluation's models (kept by early "
        "stopping)",
    )
    p.add_argument(
        "--no-programs",
        action="store_true",
        help="write the state_dicts only, not the client-IIIII.pt2 programs (torch.export, preprocessing "
        "folded in) that load without the model's code",
    )
    p.set_defaults(func=cmd_export)
