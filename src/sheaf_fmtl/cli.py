"""``sheaf-fmtl run | plot | demo``: the command-line entry point."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config

DEMO_ALGORITHMS = ("sheaf-fmtl", "local")


def _default_out(algorithm: str, dataset: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{dataset.replace(':', '_').replace('/', '_')}-{algorithm}-{stamp}"


def _print_summary(summary: dict, out: Path) -> None:
    final = summary["final"]
    print(f"{summary['algorithm']} on {summary['dataset']}: "
          f"final mean test {summary['metric']} = {final:.4f} over {summary['num_clients']} clients, "
          f"{summary['transmitted_bits']:,} bits transmitted, "
          f"{summary['wall_seconds']:.1f} s")
    print(f"results: {out}/ (config.yaml, metrics.csv, summary.json, checkpoint.pt)")


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime.simulate import run

    config = load_config(args.config, args.set)
    out = Path(args.out) if args.out else _default_out(config.algorithm, config.dataset)
    summary = run(config, out, progress=not args.quiet)
    _print_summary(summary, out)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_runs

    for path in plot_runs(args.runs, args.out):
        print(f"plot: {path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Sheaf-FMTL and local training on the built-in ``synthetic-hetero`` problem, then the plots."""
    from .plots import plot_runs
    from .runtime.simulate import run

    out = Path(args.out)
    dirs = []
    for algorithm in DEMO_ALGORITHMS:
        config = load_config(args.config, [*args.set, f"algorithm={algorithm}"])
        summary = run(config, out / algorithm, progress=not args.quiet)
        _print_summary(summary, out / algorithm)
        dirs.append(out / algorithm)
    for path in plot_runs(dirs, out):
        print(f"plot: {path}")
    return 0


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
    p = sub.add_parser("demo", help="Sheaf-FMTL vs local training on the built-in problem, with plots")
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
