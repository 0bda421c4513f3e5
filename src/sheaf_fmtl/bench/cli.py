"""``sheaf-fmtl bench``: Sheaf-FMTL rounds against the memory-bandwidth floor (see :mod:`.harness`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_bench(args: argparse.Namespace) -> int:
    from .harness import LARGEST, run_bench

    results = run_bench(
        quick=args.quick,
        device=args.device,
        out=args.out,
        threads=args.threads,
        smoke=args.smoke,
        setting_list=[LARGEST] if args.largest else None,
        scaling=not args.largest,
    )
    print(results["report"])
    print(f"results: {Path(args.out) / 'bench.json'}, plot: {Path(args.out) / 'scaling.png'}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="time Sheaf-FMTL rounds against the memory-bandwidth floor")
    p.add_argument(
        "--quick", action="store_true", help="shrink the paper-scale setting to a few hundred MB of maps"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", default="runs/bench", help="folder for bench.json and scaling.png")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument(
        "--largest",
        action="store_true",
        help="only the paper's largest setting: R-MNIST scale, gamma 0.03, bfloat16 maps (~17 GiB)",
    )
    p.add_argument("--smoke", action="store_true", help="tiny settings that finish in seconds (for tests)")
    p.set_defaults(func=cmd_bench)
