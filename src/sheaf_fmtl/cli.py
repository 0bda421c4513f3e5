"""``sheaf-fmtl run | plot | demo``: the command-line entry point."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, RunConfig, load_config


@dataclass(frozen=True)
class DemoRun:
    """One curve of ``sheaf-fmtl demo``: ``key`` names its run folder and its entry in
    ``demo.json``; ``defaults`` are overrides the user's ``--set`` can change, ``forced`` ones it
    cannot; ``feature_maps``: Sheaf-FMTL with the fixed feature-aware maps of
    :func:`sheaf_fmtl.sheaf.special_cases.shared_feature_maps` (needs ``eta = 0``)."""

    key: str
    algorithm: str
    label: str
    defaults: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()
    feature_maps: bool = False


# (problem, overrides of every run of the problem, runs) of `sheaf-fmtl demo`; the homogeneous
# variant and the feature-aware maps only for synthetic-clusters, whose option `homogeneous` keeps
# clients, samples and labels and whose feature subsets are known (`clusters_feature_sets`).
DEMO_PROBLEMS: tuple[tuple[str, tuple[str, ...], tuple[DemoRun, ...]], ...] = (
    ("heterogeneous", (), (
        DemoRun("sheaf-fmtl", "sheaf-fmtl", "Sheaf-FMTL"),  # + which maps, from the run's config
        DemoRun("sheaf-fmtl-feature-maps", "sheaf-fmtl", "Sheaf-FMTL, feature-aware fixed maps",
                forced=("eta=0",), feature_maps=True),
        DemoRun("local", "local", "local training"),
    )),
    ("homogeneous", ("data.homogeneous=true",), (
        DemoRun("sheaf-fmtl", "sheaf-fmtl", "Sheaf-FMTL", defaults=("eta=0",)),
        DemoRun("dfedu", "dfedu", "dFedU"),
        DemoRun("local", "local", "local training"),
    )),
)

# Issue 9's targets: (problem, run, baseline) -> (least difference in points, least bits ratio of
# the baseline over the run, the target in words).
DEMO_TARGETS: dict[tuple[str, str, str], tuple[float, float | None, str]] = {
    ("heterogeneous", "sheaf-fmtl", "local"): (3.0, None, ">= +3 points over local training"),
    ("heterogeneous", "sheaf-fmtl-feature-maps", "local"): (3.0, None, ">= +3 points over local training"),
    ("homogeneous", "sheaf-fmtl", "dfedu"): (-1.0, 10.0, "within 1 point of dFedU with >= 10x fewer bits"),
}
# The comparisons printed and written to demo.json: (problem, run, baseline).
DEMO_COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("heterogeneous", "sheaf-fmtl", "local"),
    ("heterogeneous", "sheaf-fmtl-feature-maps", "local"),
    ("heterogeneous", "sheaf-fmtl-feature-maps", "sheaf-fmtl"),
    ("homogeneous", "sheaf-fmtl", "dfedu"),
    ("homogeneous", "sheaf-fmtl", "local"),
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
    with learned random maps, Sheaf-FMTL with feature-aware fixed maps and local training on it; for
    ``synthetic-clusters`` also Sheaf-FMTL (fixed shared random maps), dFedU and local training on
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


def _demo_run(
    args: argparse.Namespace, extra: tuple[str, ...], spec: DemoRun, run_dir: Path
) -> tuple[RunConfig, dict]:
    """Run one curve of the demo into ``run_dir``; returns its config and summary."""
    from .runtime import simulate

    sets = [*spec.defaults, *args.set, *extra, *spec.forced, f"algorithm={spec.algorithm}"]
    config = load_config(args.config, sets)
    if not spec.feature_maps:
        return config, simulate.run(config, run_dir, progress=not args.quiet)
    from .data.synthetic import clusters_feature_sets
    from .sheaf.special_cases import shared_feature_maps

    features = clusters_feature_sets(config.data, config.seed, config.clients)
    sim = shared_feature_maps(config, simulate.load_dataset(config), features)
    # the same recording, bits, divergence handling and run folder as every other curve
    return config, simulate.run(sim.config, run_dir, progress=not args.quiet, sim=sim)


def _demo(args: argparse.Namespace) -> int:
    import json

    from .plots import plot_demo

    out = Path(args.out)
    base = load_config(args.config, args.set)
    clusters = base.dataset == "synthetic-clusters"
    problems = DEMO_PROBLEMS if clusters else DEMO_PROBLEMS[:1]
    finals: dict[str, dict[str, dict]] = {}
    panels = []
    for problem, extra, specs in problems:
        curves = []
        for spec in specs:
            if spec.feature_maps and not clusters:  # feature subsets known for synthetic-clusters only
                continue
            run_dir = out / problem / spec.key
            config, summary = _demo_run(args, extra, spec, run_dir)
            _print_summary(summary, run_dir)
            label = spec.label
            if spec.algorithm == "sheaf-fmtl" and not spec.feature_maps:
                learned = "learned" if config.eta > 0 and config.lam > 0 else "fixed"
                shared = "shared " if config.shared_maps and len(summary["model_dims"]) == 1 else ""
                label += f", {learned} {shared}random maps (gamma={config.gamma:g})"
            keys = ("final", "metric", "transmitted_bits", "rounds", "model_dims")
            finals.setdefault(problem, {})[spec.key] = {"label": label, **{k: summary[k] for k in keys}}
            curves.append((run_dir, label))
        panels.append((problem, curves))
    title = f"{base.dataset}"
    if clusters:
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
    """Each of :data:`DEMO_COMPARISONS` whose runs exist: the difference of the final metric
    (accuracy points, or the metric's units), the bits ratio (the baseline's bits over the run's;
    ``None`` when either sends nothing) and, where issue 9 sets one, whether the target is met."""
    out = {}
    for problem, key, other_key in DEMO_COMPARISONS:
        runs = finals.get(problem, {})
        if key not in runs or other_key not in runs:
            continue
        run, other = runs[key], runs[other_key]
        scale, unit = (100.0, "accuracy points") if run["metric"] == "accuracy" else (1.0, run["metric"])
        diff = scale * (run["final"] - other["final"])
        bits, other_bits = run["transmitted_bits"], other["transmitted_bits"]
        ratio = other_bits / bits if bits and other_bits else None
        text = (
            f"{problem}: {run['label']} {run['final']:.4f} vs {other['label']} {other['final']:.4f}: "
            f"{diff:+.2f} {unit}"
        )
        if ratio and ratio >= 1:
            text += f"; {other['label']} sent {ratio:.3g}x the bits"
        elif ratio:
            text += f"; it sent {1 / ratio:.3g}x the bits of {other['label']}"
        entry: dict[str, Any] = {
            "run": key, "baseline": other_key, "difference": diff, "unit": unit,
            "bits": bits, "baseline_bits": other_bits, "bits_ratio": ratio,
        }
        target = DEMO_TARGETS.get((problem, key, other_key))
        if target is not None and run["metric"] == "accuracy":
            least_diff, least_ratio, words = target
            met = diff >= least_diff and (least_ratio is None or (ratio is not None and ratio >= least_ratio))
            entry["target"], entry["target_met"] = words, met
            text += f" -- issue-9 target ({words}): {'met' if met else 'NOT met'}"
        entry["text"] = text
        out[f"{problem}/{key}-vs-{other_key}"] = entry
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
