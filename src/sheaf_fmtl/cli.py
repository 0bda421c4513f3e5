"""``sheaf-fmtl run | plot | demo``: the command-line entry point."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config
from .metrics.recorder import format_summary


def _default_out(algorithm: str, dataset: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{dataset.replace(':', '_').replace('/', '_')}-{algorithm}-{stamp}"


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime.simulate import run

    config = load_config(args.config, args.set)
    out = Path(args.out) if args.out else _default_out(config.algorithm, config.dataset)
    summary = run(config, out, progress=not args.quiet)
    print(format_summary(summary, out))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_runs

    for path in plot_runs(args.runs, args.out):
        print(f"plot: {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The config's problem (``configs/demo.yaml``: the built-in ``synthetic-clusters``): Sheaf-FMTL
    with learned random maps, Sheaf-FMTL with feature-aware fixed maps and local training on it; for
    ``synthetic-clusters`` also Sheaf-FMTL (fixed shared random maps), dFedU and local training on
    its homogeneous variant (same clients, samples and labels, every feature seen, so that all
    models have one size and dFedU can run). Then one figure (``demo.png``) and ``demo.json``."""
    import torch

    # The demo's models have at most a few dozen parameters: one thread is fastest, and idle
    # worker threads spinning on busy cores slowed its rounds tenfold or more in our runs.
    from .demo import run_demo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_demo(args.config, args.set, Path(args.out), quiet=args.quiet)
    finally:
        torch.set_num_threads(threads)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sheaf-fmtl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", nargs="?", help="YAML config file (keys: see README)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key")
        p.add_argument("--out", help="output folder")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("run", help="run one experiment")
    common(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser(
        "demo", help="Sheaf-FMTL vs local training and dFedU on the built-in problem, with plots"
    )
    common(p)
    p.set_defaults(func=cmd_demo, out="runs/demo")
    p = sub.add_parser("plot", help="plot recorded runs")
    p.add_argument("runs", nargs="+", help="run folders")
    p.add_argument("--out", help="folder for the PNG files (default: the first run folder)")
    p.set_defaults(func=cmd_plot)
    for extension in _extensions():
        extension(sub)
    return parser


def _extensions() -> list:
    """Sub-command groups contributed by other modules (``add_parser(subparsers)``)."""
    found = []
    for module in ("sheaf_fmtl.data.cli", "sheaf_fmtl.bench.cli"):
        try:
            found.append(__import__(module, fromlist=["add_parser"]).add_parser)
        except ModuleNotFoundError:
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as e:
        print(f"sheaf-fmtl: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        print(f"sheaf-fmtl: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # divergence: metrics up to the last good round are kept
        print(f"sheaf-fmtl: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
