"""``sheaf-fmtl demo``: Sheaf-FMTL's map modes against local training and dFedU on the built-in
``synthetic-clusters`` problem, one figure and a JSON of every comparison.

On the heterogeneous problem (clients see different feature subsets, so model sizes differ): the
default maps (``maps=auto``, which picks feature maps there), the paper's learned maps and local
training. On its homogeneous variant: the default maps (``maps=auto``: redrawn each round from a
shared seed), the paper's learned maps, dFedU and local training.

Every run reads the one config, so a key only some of them read (``eta``: the learned maps) is not
warned about per run; a key none of them reads is, once (each run's ``config.yaml`` lists its own)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig, load_config
from .config.files import replace_file
from .config.usage import UnusedKeysWarning
from .data.bounded import read_text_bounded
from .metrics.results import format_summary, interrupted_line, interrupted_status


@dataclass(frozen=True)
class DemoRun:
    """One curve of ``sheaf-fmtl demo``: ``key`` names its run folder and its entry in
    ``demo.json``; ``defaults`` are overrides the user's ``--set`` can change, ``forced`` ones it
    cannot."""

    key: str
    algorithm: str
    label: str
    defaults: tuple[str, ...] = ()
    forced: tuple[str, ...] = ()


PAPER = "Sheaf-FMTL, the paper's learned maps"
AUTO = "Sheaf-FMTL, default maps (auto: {maps})"  # filled with the mode maps=auto chose
# (problem, overrides of every run of the problem, runs) of `sheaf-fmtl demo`; the homogeneous
# variant only for synthetic-clusters, whose option `homogeneous` keeps clients, samples and labels.
# Redrawn maps without estimates pull with lam * d_e/d in expectation, so their lam is the config's
# (dFedU's) over gamma, capped below the stability limit alpha*lam*lambda_max(L) < 2: 1.0 here.
DEMO_PROBLEMS: tuple[tuple[str, tuple[str, ...], tuple[DemoRun, ...]], ...] = (
    (
        "heterogeneous",
        (),
        (
            DemoRun("sheaf-fmtl-features", "sheaf-fmtl", AUTO, forced=("maps=auto",)),
            DemoRun("sheaf-fmtl-learned", "sheaf-fmtl", PAPER, forced=("maps=learned",)),
            DemoRun("local", "local", "local training"),
        ),
    ),
    (
        "homogeneous",
        ("data.homogeneous=true",),
        (
            DemoRun("sheaf-fmtl-redrawn", "sheaf-fmtl", AUTO, defaults=("lam=1.0",), forced=("maps=auto",)),
            DemoRun("sheaf-fmtl-learned", "sheaf-fmtl", PAPER, forced=("maps=learned",)),
            DemoRun("dfedu", "dfedu", "dFedU"),
            DemoRun("local", "local", "local training"),
        ),
    ),
)

# The comparisons printed and written to demo.json: (problem, run, baseline).
DEMO_COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("heterogeneous", "sheaf-fmtl-features", "local"),
    ("heterogeneous", "sheaf-fmtl-learned", "local"),
    ("homogeneous", "sheaf-fmtl-redrawn", "dfedu"),
    ("homogeneous", "sheaf-fmtl-redrawn", "local"),
    ("homogeneous", "sheaf-fmtl-learned", "dfedu"),
)


def _demo_run(
    config_path: str | None,
    overrides: list[str],
    quiet: bool,
    extra: tuple[str, ...],
    spec: DemoRun,
    run_dir: Path,
    flags: dict[str, Any] | None = None,
) -> tuple[RunConfig, dict[str, Any]]:
    """Run one curve of the demo into ``run_dir``; returns its config and summary. ``flags``:
    config keys given as flags (``--seed``, ``--clients``, ...), applied after ``overrides``."""
    from .runtime.run.launching.launch import launch, summary_of

    sets = [*spec.defaults, *overrides, *extra, *spec.forced, f"algorithm={spec.algorithm}"]
    config = load_config(config_path, sets, flags)
    with warnings.catch_warnings():  # keys other runs of the demo read: see _run_problems
        warnings.simplefilter("ignore", UnusedKeysWarning)
        ran = launch(config, run_dir, progress=not quiet, overwrite=False)  # processes = K: K ranks
        return config, summary_of(ran) or {}


def _unused(run_dir: Path) -> set[str]:
    """The keys the run in ``run_dir`` did not read (its ``config.yaml``'s ``unused``)."""
    import yaml

    return set(yaml.safe_load(read_text_bounded(run_dir / "config.yaml")).get("unused") or ())


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
    first with ``overwrite``), then ``demo.png`` and ``demo.json`` (each comparison: the difference
    of the final metric and the bits ratio). Returns the exit status (128 + signal when a run was
    stopped)."""
    import json

    from .plots import plot_demo
    from .runtime.run.folder.clearing import prepare_out_dir
    from .runtime.run.folder.rundir import check_out_dir
    from .runtime.run.launching.launch import refuse_in_a_rank

    refuse_in_a_rank()
    base = load_config(config_path, overrides, flags)
    check_out_dir(out, overwrite)
    prepare_out_dir(out, overwrite, kind="demo")  # (a folder of runs: --overwrite clears them too)
    clusters = base.dataset == "synthetic-clusters"
    problems = DEMO_PROBLEMS if clusters else DEMO_PROBLEMS[:1]
    ran = _run_problems(problems, config_path, overrides, out, quiet, flags)
    if isinstance(ran, int):  # a run stopped by a signal: its exit status
        return ran
    finals, panels = ran
    title = f"{base.dataset}"
    if clusters:
        from .data.synthetic import describe_clusters

        title += f": {describe_clusters(base.data, base.clients)}"
    plot = plot_demo(panels, out, title=f"{title}\n{base.graph} graph, {base.rounds} rounds")
    comparisons = _demo_comparisons(finals)
    replace_file(out / "demo.json", json.dumps({"runs": finals, "comparisons": comparisons}, indent=2))
    print(f"\n{title}")
    for line in comparisons.values():
        print(f"  {line['text']}")
    print(f"plot: {plot}\nsummary: {out / 'demo.json'}")
    return 0


def _run_problems(
    problems: tuple[tuple[str, tuple[str, ...], tuple[DemoRun, ...]], ...],
    config_path: str | None,
    overrides: list[str],
    out: Path,
    quiet: bool,
    flags: dict[str, Any] | None,
) -> tuple[dict[str, dict[str, dict[str, Any]]], list[tuple[str, list[tuple[Path, str]]]]] | int:
    """Every run of ``problems`` into ``out``, each run's summary printed: the final numbers of each
    run (by problem and run) and the figure's panels; or, once a signal stopped a run, its exit
    status. A key that no run read is warned about once (each run's own warning is silenced)."""
    finals: dict[str, dict[str, dict[str, Any]]] = {}
    panels = []
    unread: set[str] | None = None  # keys no run of the demo reads
    for problem, extra, specs in problems:
        curves = []
        for spec in specs:
            run_dir = out / problem / spec.key
            config, summary = _demo_run(config_path, overrides, quiet, extra, spec, run_dir, flags)
            print(format_summary(summary, run_dir))
            unread = _unused(run_dir) if unread is None else unread & _unused(run_dir)
            if summary["status"] == "interrupted":
                print(interrupted_line(summary, run_dir), file=sys.stderr)
                return interrupted_status(summary)
            maps = summary.get("maps", config.maps)  # the mode that ran (maps=auto: the one it chose)
            label = spec.label.format(maps=maps)
            if config.algorithm == "sheaf-fmtl" and maps in ("learned", "redrawn"):
                label += f" (gamma={config.gamma:g})"
            keys = ("final", "metric", "transmitted_bits", "rounds", "model_dims")
            finals.setdefault(problem, {})[spec.key] = {"label": label, **{k: summary[k] for k in keys}}
            curves.append((run_dir, label))
        panels.append((problem, curves))
    if unread:
        named = f"key{'s' if len(unread) > 1 else ''} {', '.join(sorted(unread))}"
        warnings.warn(f"config {named}: read by no run of the demo", UnusedKeysWarning, stacklevel=3)
    return finals, panels


def _demo_comparisons(finals: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each of :data:`DEMO_COMPARISONS` whose runs exist: the difference of the final metric
    (accuracy points, or the metric's units), the bits ratio (the baseline's bits over the run's;
    ``None`` when either sends nothing)."""
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
        entry["text"] = text
        out[f"{problem}/{key}-vs-{other_key}"] = entry
    return out
