"""``sheaf-fmtl run | plot | demo``: the command-line entry point."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config

# (problem, extra overrides, algorithms) of `sheaf-fmtl demo`; the homogeneous variant only for
# synthetic-clusters, whose option `homogeneous` keeps clients, samples and labels.
DEMO_PROBLEMS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("heterogeneous", (), ("sheaf-fmtl", "local")),
    ("homogeneous", ("data.homogeneous=true",), ("sheaf-fmtl", "dfedu", "local")),
)


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
    """The config's problem (``configs/demo.yaml``: the built-in ``synthetic-clusters``): Sheaf-FMTL
    and local training on it; for ``synthetic-clusters`` also Sheaf-FMTL, dFedU and local training on
    its homogeneous variant (same clients, samples and labels, every feature seen, so that all
    models have one size and dFedU can run). Then one figure (``demo.png``) and ``demo.json``."""
    import torch

    # The demo's models have at most a few dozen parameters: one thread is fastest, and idle
    # worker threads spinning on busy cores slowed its rounds tenfold or more in our runs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _demo(args)
    finally:
        torch.set_num_threads(threads)


def _demo(args: argparse.Namespace) -> int:
    import json

    from .plots import plot_demo
    from .runtime.simulate import run

    out = Path(args.out)
    base = load_config(args.config, args.set)
    problems = DEMO_PROBLEMS if base.dataset == "synthetic-clusters" else DEMO_PROBLEMS[:1]
    finals: dict[str, dict[str, dict]] = {}
    panels = []
    for problem, extra, algorithms in problems:
        dirs = []
        for algorithm in algorithms:
            config = load_config(args.config, [*args.set, *extra, f"algorithm={algorithm}"])
            run_dir = out / problem / algorithm
            summary = run(config, run_dir, progress=not args.quiet)
            _print_summary(summary, run_dir)
            finals.setdefault(problem, {})[algorithm] = {
                key: summary[key] for key in ("final", "metric", "transmitted_bits", "rounds", "model_dims")
            }
            dirs.append(run_dir)
        panels.append((problem, dirs))
    title = f"{base.dataset}"
    if base.dataset == "synthetic-clusters":
        from .data.synthetic import describe_clusters

        title += f": {describe_clusters(base.data, base.clients)}"
    plot = plot_demo(panels, out, title=f"{title}\n{base.graph} graph, {base.rounds} rounds")
    comparisons = _demo_comparisons(finals)
    (out / "demo.json").write_text(json.dumps({"runs": finals, "comparisons": comparisons}, indent=2))
    print(f"\n{title}")
    for line in comparisons.values():
        print(f"  {line['text']}")
    print(f"plot: {plot}\nsummary: {out / 'demo.json'}")
    return 0


def _demo_comparisons(finals: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Sheaf-FMTL against each baseline of each problem: metric difference and the bits ratio."""
    out = {}
    for problem, runs in finals.items():
        sheaf = runs.get("sheaf-fmtl")
        if sheaf is None:
            continue
        scale, unit = (100.0, "accuracy points") if sheaf["metric"] == "accuracy" else (1.0, sheaf["metric"])
        for algorithm, other in runs.items():
            if algorithm == "sheaf-fmtl":
                continue
            diff = scale * (sheaf["final"] - other["final"])
            bits = sheaf["transmitted_bits"]
            ratio = other["transmitted_bits"] / bits if bits else None
            text = (
                f"{problem}: Sheaf-FMTL {sheaf['final']:.4f} vs {algorithm} {other['final']:.4f}: "
                f"{diff:+.2f} {unit}"
            )
            if ratio:
                text += f", {ratio:.1f}x the bits of Sheaf-FMTL"
            out[f"{problem}/sheaf-fmtl-vs-{algorithm}"] = {
                "difference": diff, "unit": unit, "bits_ratio": ratio, "text": text,
            }
    return out


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
