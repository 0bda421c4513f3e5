"""``sheaf-fmtl demo``: Sheaf-FMTL against local training and dFedU on the built-in
``synthetic-clusters`` problem (issue 9's demo), one figure and a JSON of every comparison."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig, load_config
from .metrics.recorder import format_summary, interrupted_line, interrupted_status


@dataclass(frozen=True)
class DemoRun:
    """One curve of ``sheaf-fmtl demo``: ``key`` names its run folder and its entry in
    ``demo.json``; ``defaults`` are overrides the user's ``--set`` can change, ``forced`` ones it
    cannot; ``feature_maps``: Sheaf-FMTL with the fixed feature-aware maps of
    :func:`sheaf_fmtl.scenarios.shared_feature_maps` (needs ``eta = 0``)."""

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
    (
        "heterogeneous",
        (),
        (
            DemoRun("sheaf-fmtl", "sheaf-fmtl", "Sheaf-FMTL"),  # + which maps, from the run's config
            DemoRun(
                "sheaf-fmtl-feature-maps",
                "sheaf-fmtl",
                "Sheaf-FMTL, feature-aware fixed maps",
                forced=("eta=0",),
                feature_maps=True,
            ),
            DemoRun("local", "local", "local training"),
        ),
    ),
    (
        "homogeneous",
        ("data.homogeneous=true",),
        (
            DemoRun("sheaf-fmtl", "sheaf-fmtl", "Sheaf-FMTL", defaults=("eta=0",)),
            DemoRun("dfedu", "dfedu", "dFedU"),
            DemoRun("local", "local", "local training"),
        ),
    ),
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


def _demo_run(
    config_path: str | None,
    overrides: list[str],
    quiet: bool,
    extra: tuple[str, ...],
    spec: DemoRun,
    run_dir: Path,
    flags: dict[str, Any] | None = None,
) -> tuple[RunConfig, dict]:
    """Run one curve of the demo into ``run_dir``; returns its config and summary. ``flags``:
    config keys given as flags (``--seed``, ``--clients``, ...), applied after ``overrides``."""
    from .runtime import loop, simulate

    sets = [*spec.defaults, *overrides, *extra, *spec.forced, f"algorithm={spec.algorithm}"]
    config = load_config(config_path, sets, flags)
    if not spec.feature_maps:
        return config, loop.run(config, run_dir, progress=not quiet)
    from .data.synthetic import clusters_feature_sets
    from .scenarios import shared_feature_maps

    features = clusters_feature_sets(config.data, config.seed, config.clients)
    sim = shared_feature_maps(config, simulate.load_dataset(config), features)
    # the same recording, bits, divergence handling and run folder as every other curve
    return config, loop.run(sim.config, run_dir, progress=not quiet, sim=sim)


def run_demo(
    config_path: str | None,
    overrides: list[str],
    out: Path,
    *,
    quiet: bool = False,
    overwrite: bool = False,
    flags: dict[str, Any] | None = None,
) -> int:
    """``sheaf-fmtl demo``: every run of :data:`DEMO_PROBLEMS` into ``out`` (new or empty; cleared
    first with ``overwrite``), then ``demo.png`` and ``demo.json`` (each comparison, and whether
    issue 9's target for it is met). Returns the exit status (128 + signal when a run was stopped)."""
    import json

    from .plots import plot_demo
    from .runtime.rundir import check_out_dir, prepare_out_dir

    base = load_config(config_path, overrides, flags)
    check_out_dir(out, overwrite)
    prepare_out_dir(out, overwrite)
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
            config, summary = _demo_run(config_path, overrides, quiet, extra, spec, run_dir, flags)
            print(format_summary(summary, run_dir))
            if summary["status"] == "interrupted":
                print(interrupted_line(summary, run_dir), file=sys.stderr)
                return interrupted_status(summary)
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
            "run": key,
            "baseline": other_key,
            "difference": diff,
            "unit": unit,
            "bits": bits,
            "baseline_bits": other_bits,
            "bits_ratio": ratio,
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
