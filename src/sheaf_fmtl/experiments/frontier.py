"""``sheaf-fmtl reproduce frontier``: accuracy (School: MSE) against total transmitted bits for the
sheaf coupling and the compressors decentralized learning uses, on one personalised objective.

Every method couples the same clients over the same graph: dFedU's Laplacian coupling, whole
(``compressor = none``), through CHOCO-SGD's compressed copies (``top-k``, ``rand-k``, ``qsgd``,
``sign``) or PowerGossip's low-rank differences; and Sheaf-FMTL's maps redrawn each round at
``gamma`` (with and without CHOCO-form estimates). The budget is spent on two axes: coordinates a
message (the compression, ``gamma``) and edges a round (budgeted links, ``graph_schedule =
matchings``, ``link_budget`` from half the graph's matchings a round to one), the sheaf at ``gamma``
0.01 and 0.03 and its rivals (dFedU whole, top-k at 1 %) under the same link budgets; a budgeted
sheaf level's strength is its rule's ``lam`` (which divides the pull by the share of edges on), a
half or a quarter of it; the estimates' their rule's and 10, 30 and 100 times it. Each method is
swept over its compression (kept fraction, bits, rank, ``gamma``); at each level its strength
(``lam``, and CHOCO's ``consensus_step``) is chosen from a small grid (``lam`` 0.1, 0.3, 1; the
default consensus step and 1; the sheaf's ``lam`` rule and the pulls 0.03 and 0.3 beside it) on a
validation split (seed 0, ``validation = 0.2``; the test split is never read for it), then run on
the test split for every seed. Output in ``OUT``: ``frontier.csv`` and ``frontier.md`` (every point:
metric, total bits, bits per round measured and by the formula, seconds, bits to target and how many
times fewer than dFedU's; the Pareto front marked) and ``frontier.png`` (one panel per problem, log
bits, seed bands, the front). Cells are cached in ``OUT/cells`` as the other experiments' (an
interrupted run continues where it stopped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import RunConfig, from_mapping, parse_overrides
from ..progress import bar, note
from ..runtime.run.folder.ledger import record_owned
from ..runtime.run.folder.rundir import check_out_dir, claim
from ..runtime.run.stopping.interrupt import signalled
from .cells import finished, run_folder
from .frontier_points import Method, Point
from .reproduce import data_keys, data_present, missing_note, no_data_error, seed_count

VALIDATION = 0.2
SEEDS, QUICK_SEEDS = 3, 1
FRACTIONS = (0.1, 0.03, 0.01, 0.003, 0.001)
QUICK_FRACTIONS = (0.1, 0.01)

#: problem -> (its keys, the problem's name in the figure)
PROBLEMS: dict[str, tuple[dict[str, Any], str]] = {
    "school": ({"dataset": "school"}, "School"),
    "vehicle": ({"dataset": "vehicle"}, "Vehicle"),
    "synthetic-clusters": (
        {"dataset": "synthetic-clusters", "data": {"homogeneous": True}},
        "synthetic-clusters (homogeneous)",
    ),
    "rmnist": ({"dataset": "rmnist", "clients": 12, "rounds": 80}, "R-MNIST, 12 clients, 80 rounds"),
}
DFEDU_LAMS = (0.1, 0.3, 1.0)
#: Link budgets (``graph_schedule = matchings``): the share of the graph's matchings a round; None:
#: one matching a round.
LINK_BUDGETS: tuple[float | None, ...] = (0.5, 0.35, 0.2, None)
QUICK_LINK_BUDGETS: tuple[float | None, ...] = (0.35,)
#: A budgeted sheaf level's strength: its rule (``lam`` null, which divides the pull by the share
#: of edges on) and these fractions of the rule's ``lam``, read from the rule's validation run (the
#: rule is often at its stability cap, so a multiple above 1 passes the start-up check on one seed's
#: graph and not on another's).
RULE_TIMES = (0.25, 0.5)
#: The estimates' strengths beside their rule: multiples of its ``lam``.
ESTIMATE_TIMES = (10.0, 30.0, 100.0)
QUICK_LAMS = (0.1, 1.0)


METHODS = (
    Method("local training", "local", {"algorithm": "local"}, grid="none"),
    Method("dFedU (whole models)", "dfedu", {"algorithm": "dfedu"}),
    Method(
        "dFedU + top-k (CHOCO)",
        "top-k",
        {"algorithm": "dfedu", "compressor": "top-k"},
        "compression",
        FRACTIONS,
        QUICK_FRACTIONS,
        "choco",
    ),
    Method(
        "dFedU + rand-k (CHOCO)",
        "rand-k",
        {"algorithm": "dfedu", "compressor": "rand-k"},
        "compression",
        FRACTIONS,
        grid="choco",
        quick=False,
    ),
    Method(
        "dFedU + QSGD (CHOCO)",
        "qsgd",
        {"algorithm": "dfedu", "compressor": "qsgd"},
        "quantization_bits",
        (8, 4, 2),
        (4,),
        "choco",
    ),
    Method(
        "dFedU + sign (CHOCO)",
        "sign",
        {"algorithm": "dfedu", "compressor": "sign"},
        grid="choco",
        quick=False,
    ),
    Method(
        "dFedU + PowerGossip",
        "powergossip",
        {"algorithm": "dfedu", "compressor": "powergossip"},
        "rank",
        (4, 2, 1),
        (1,),
    ),
    Method(
        "Sheaf-FMTL, redrawn maps",
        "redrawn",
        {"algorithm": "sheaf-fmtl", "maps": "redrawn"},
        "gamma",
        FRACTIONS,
        QUICK_FRACTIONS,
        "sheaf",
    ),
    Method(
        "Sheaf-FMTL, redrawn (gamma 0.01), budgeted links",
        "redrawn-links",
        {"algorithm": "sheaf-fmtl", "maps": "redrawn", "gamma": 0.01, "graph_schedule": "matchings"},
        "link_budget",
        LINK_BUDGETS,
        QUICK_LINK_BUDGETS,
        "sheaf-links",
    ),
    Method(
        "Sheaf-FMTL, redrawn (gamma 0.03), budgeted links",
        "redrawn-wide-links",
        {"algorithm": "sheaf-fmtl", "maps": "redrawn", "gamma": 0.03, "graph_schedule": "matchings"},
        "link_budget",
        LINK_BUDGETS,
        grid="sheaf-links",
        quick=False,
    ),
    Method(
        "Sheaf-FMTL, redrawn + estimates (gamma 0.01), budgeted links",
        "estimates-links",
        {
            "algorithm": "sheaf-fmtl",
            "maps": "redrawn",
            "estimates": True,
            "gamma": 0.01,
            "graph_schedule": "matchings",
        },
        "link_budget",
        LINK_BUDGETS,
        grid="estimates",
        quick=False,
    ),
    Method(
        "dFedU, budgeted links",
        "dfedu-links",
        {"algorithm": "dfedu", "graph_schedule": "matchings"},
        "link_budget",
        LINK_BUDGETS,
        grid="dfedu-links",
        quick=False,
    ),
    Method(
        "dFedU + top-k 1 % (CHOCO), budgeted links",
        "top-k-links",
        {"algorithm": "dfedu", "compressor": "top-k", "compression": 0.01, "graph_schedule": "matchings"},
        "link_budget",
        LINK_BUDGETS,
        grid="choco-links",
        quick=False,
    ),
    Method(
        "Sheaf-FMTL, redrawn + estimates",
        "estimates",
        {"algorithm": "sheaf-fmtl", "maps": "redrawn", "estimates": True},
        "gamma",
        FRACTIONS,
        grid="estimates",
        quick=False,
    ),
)

#: The order the methods run in: the sheaf's points early, so an interrupted frontier has them.
RUN_ORDER = (
    "local",
    "dfedu",
    "redrawn",
    "top-k",
    "redrawn-links",
    "redrawn-wide-links",
    "estimates",
    "estimates-links",
    "dfedu-links",
    "qsgd",
    "powergossip",
    "rand-k",
    "sign",
    "top-k-links",
)


def strength_grid(method: Method, level: Any, quick: bool) -> list[dict[str, Any]]:
    """The key sets a level's strength is chosen from on the validation split."""
    lams = QUICK_LAMS if quick else DFEDU_LAMS
    if method.grid == "none":
        return [{}]
    if method.grid == "dfedu":
        return [{"lam": lam} for lam in lams]
    if method.grid in ("choco", "choco-links"):  # CHOCO's consensus step from omega, or 1
        steps: tuple[float | None, ...] = (None,) if quick else (None, 1.0)
        grid = [{"lam": lam, "consensus_step": s} for lam in lams for s in steps]
        return grid + ([{"lam": None}] if method.grid == "choco-links" else [])  # dFedU's rule, pull 0.1 / b
    if method.grid == "sheaf":  # the lam rule (pull 0.1/q), and pulls 0.03 and 0.3 beside it
        return [{"lam": None}] + ([] if quick else [{"lam": p / level} for p in (0.03, 0.3)])
    if method.grid == "sheaf-links":  # the rule, and multiples of the lam it chose
        return [{"lam": None}] + ([] if quick else [{"lam_times": t} for t in RULE_TIMES])
    if method.grid == "dfedu-links":  # dFedU's grid and its rule (pull 0.1 / b)
        return [{"lam": lam} for lam in lams] + [{"lam": None}]
    # estimates: the rule (half the consensus step's mean-square limit, a bound far below what runs
    # stably on the built-in problems) and multiples of it, past the start-up check
    return [{"lam": None}] + (
        [] if quick else [{"lam_times": t, "stability_check": False} for t in ESTIMATE_TIMES]
    )


def _relative(keys: dict[str, Any], rule_lam: float | None) -> dict[str, Any] | None:
    """``keys`` with ``lam_times: t`` resolved to ``lam: t * rule_lam`` (``None``: not known, the
    rule's run missing or refused, so the key set is skipped)."""
    if "lam_times" not in keys:
        return keys
    if rule_lam is None:
        return None
    rest = {k: v for k, v in keys.items() if k != "lam_times"}
    return {**rest, "lam": float(f"{keys['lam_times'] * rule_lam:.4g}")}


def problem_config(problem: str, keys: dict[str, Any], overrides: Sequence[str], quick: bool) -> RunConfig:
    base, _ = PROBLEMS[problem]
    mapping: dict[str, Any] = {**base, **keys}
    for key, value in parse_overrides(list(overrides)).items():
        mapping[key] = (
            {**mapping.get("data", {}), **value} if key == "data" and isinstance(value, dict) else value
        )
    return from_mapping(mapping)


def _level_keys(method: Method, level: Any) -> dict[str, Any]:
    return {**method.keys, **({method.knob: level} if method.knob else {})}


def _slug(method: Method, level: Any) -> str:
    return method.slug + ("" if level is None else f"-{level:g}")


def _run(config: RunConfig, folder: Path, marker: dict[str, Any], run: bool = True) -> dict[str, Any]:
    """The cell's finished summary, running it first when ``run`` (else ``{}`` when not finished)."""
    done = finished(folder, config)
    if done is not None or not run:
        return done or {}
    return run_folder(config, folder, marker)


def _score(summary: dict[str, Any]) -> float:
    final = summary.get("final")
    if final is None or summary.get("status") != "ok" or not math.isfinite(final):
        return -math.inf
    return float(final) if summary.get("higher_is_better", True) else -float(final)


def tune_and_test(
    problem: str,
    method: Method,
    level: Any,
    out: Path,
    seeds: Sequence[int],
    quick: bool,
    overrides: Sequence[str],
    run: bool = True,
) -> Point:
    """Choose the level's strength on the validation split (seed 0), then run every seed on test."""
    folder = out / "cells" / problem / _slug(method, level)
    grid = strength_grid(method, level, quick)
    best, best_score = grid[0], -math.inf
    rule_lam: float | None = None  # the lam the rule chose (grid[0] with lam null), for "lam_times"
    if len(grid) > 1:
        for k, given in enumerate(grid):
            keys = _relative(given, rule_lam)
            if keys is None:
                continue
            config = problem_config(
                problem, {**_level_keys(method, level), **keys, "validation": VALIDATION}, overrides, quick
            )
            summary = _run(
                config.replace(seed=0), folder / f"tune{k}", {"frontier": problem, "tune": keys}, run
            )
            if k == 0 and keys.get("lam", 0.0) is None:
                rule_lam = summary.get("lam")
            if _score(summary) > best_score:
                best, best_score = keys, _score(summary)
            if signalled():
                break
    summaries = []
    for seed in seeds:
        if signalled():
            break
        config = problem_config(problem, {**_level_keys(method, level), **best}, overrides, quick).replace(
            seed=seed
        )
        summary = _run(config, folder / f"seed{seed}", {"frontier": problem, "seed": seed}, run)
        if summary:
            summaries.append(summary)
    config = problem_config(problem, {**_level_keys(method, level), **best}, overrides, quick)
    return Point(problem, method, level, config, best, summaries, folder)


def missing_data(problems: Sequence[str], overrides: Sequence[str], quick: bool) -> dict[str, str]:
    """The problems whose dataset's files are missing where their runs would look (``data_dir``,
    ``data_search`` of ``overrides``, else ``$SHEAF_FMTL_DATA``), each with its note."""
    missing: dict[str, str] = {}
    for p in problems:
        config = problem_config(p, {}, overrides, quick)
        if not data_present(config.dataset, config.data_dir, config.data_search):
            missing[p] = missing_note(config.dataset, config.data_dir, config.data_search)
    return missing


def plan_size(methods: Sequence[Method], quick: bool, seeds: int) -> int:
    """Runs of one problem (tuning and test)."""
    total = 0
    for m in methods:
        for level in (m.quick_levels or m.levels) if quick else m.levels:
            grid = len(strength_grid(m, level, quick))
            total += (grid if grid > 1 else 0) + seeds
    return total


def frontier(
    out: str | Path,
    *,
    problems: Sequence[str] | None = None,
    quick: bool = False,
    seeds: int | None = None,
    overrides: Sequence[str] = (),
    progress: bool = True,
    run: bool = True,
) -> list[Path]:
    """Run (or reuse) every point of the frontier and write the table and the figure; ``run =
    False``: the table and figure of the cells finished so far (a point without them is left out)."""
    from .frontier_report import write_report

    out = Path(out)
    n_seeds = seed_count(seeds, QUICK_SEEDS if quick else SEEDS)  # (before any tuning)
    names = list(problems or PROBLEMS)
    unknown = [p for p in names if p not in PROBLEMS]
    if unknown:
        raise ValueError(f"frontier: unknown problem {unknown[0]!r}; allowed: {', '.join(PROBLEMS)}")
    methods = sorted((m for m in METHODS if m.quick or not quick), key=lambda m: RUN_ORDER.index(m.slug))
    seed_list = list(range(n_seeds))
    points: list[Point] = []
    check_out_dir(out, reuse=True, kind="frontier")  # a folder it may not write: said before the data
    missing = missing_data(names, overrides, quick)
    present = [p for p in names if p not in missing]
    if not present:
        datasets = list(dict.fromkeys(PROBLEMS[p][0]["dataset"] for p in names))
        raise no_data_error("reproduce frontier", datasets, *data_keys(overrides))
    for p, text in missing.items():
        note(f"frontier / {p}: {text}")
    with claim(out, reuse=True, kind="frontier"):  # new, empty, or an earlier frontier's
        total = sum(plan_size(methods, quick, len(seed_list)) for _ in present)
        pbar = bar(total=total, desc="frontier", unit="run", enabled=progress and run)
        for problem in present:
            for method in methods:
                for level in (method.quick_levels or method.levels) if quick else method.levels:
                    if signalled():
                        break
                    point = tune_and_test(problem, method, level, out, seed_list, quick, overrides, run)
                    if point.summaries:
                        points.append(point)
                    grid = len(strength_grid(method, level, quick))
                    pbar.update((grid if grid > 1 else 0) + len(seed_list))
        pbar.close()
        points.sort(key=lambda p: (names.index(p.problem), METHODS.index(p.method)))  # the table's order
        written = write_report(points, missing, out)
        record_owned(out, ["cells", *(p.name for p in written)])  # --overwrite of the folder clears them
        return written
