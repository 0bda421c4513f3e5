"""``sheaf-fmtl bench``: Sheaf-FMTL rounds against the memory-bandwidth floor (see :mod:`.harness`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..commandline import add_config_options
from ..config import ConfigError, RunConfig
from ..runtime.run.folder.clearing import check_replaceable
from ..runtime.run.folder.folderlock import is_marked
from ..runtime.run.folder.ledger import LEDGER, owned_names, record_owned
from ..runtime.run.folder.rundir import check_path, claim, mark

#: What ``bench`` writes into ``--out``.
OUTPUTS = ("bench.json", "ratios.json", "scaling.png")
#: The marker kind of a ``bench scale`` folder: it continues only what an earlier ``bench scale`` wrote.
SCALE_KIND = "bench-scale"


def cmd_bench(args: argparse.Namespace) -> int:
    from .harness import run_bench
    from .settings import LARGEST, setting_named

    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"bench --threads {args.threads}: give a number of threads >= 1 (or leave it out)")
    args.device = _checked_device(args.device or "cpu")
    check_path(args.out)  # a folder of bench results (its files rewritten), not a file
    check_replaceable(args.out, OUTPUTS)  # ... but never a file of yours
    Path(args.out).mkdir(parents=True, exist_ok=True)
    record_owned(args.out, OUTPUTS)  # (before the first write: a stopped bench's files are its own)
    setting_list = [LARGEST] if args.largest else None
    if args.settings:
        setting_list = [setting_named(name.strip()) for name in args.settings.split(",") if name.strip()]
    models = tuple(m.strip() for m in args.cohort_models.split(";") if m.strip() not in ("", "none"))
    scaling = not (args.largest or args.no_scaling)
    results = run_bench(
        quick=args.quick,
        device=args.device,
        out=args.out,
        threads=args.threads,
        smoke=args.smoke,
        setting_list=setting_list,
        scaling=scaling,
        cohort_models=models,
        map_init_on_device=args.map_init_on_device,
        keep_going=args.keep_going,
        kernels=args.map_kernels,
    )
    print(results["report"])
    plot = f", plot: {Path(args.out) / 'scaling.png'}" if scaling else ""
    print(f"results: {Path(args.out) / 'bench.json'}, ratios: {Path(args.out) / 'ratios.json'}{plot}")
    return 1 if results.get("failed") else 0


def cmd_bench_scale(args: argparse.Namespace) -> int:
    from .scale import OUTPUTS as SCALE_OUTPUTS
    from .scale import QUICK_SIZES, SIZES, report, run_scale
    from .scale_worker import PROBLEMS

    problems = tuple(p.strip() for p in args.problems.split(",") if p.strip())
    unknown = [p for p in problems if p not in PROBLEMS]
    if unknown or not problems:
        raise ConfigError(f"bench scale --problems {args.problems!r}: choose from {', '.join(PROBLEMS)}")
    try:
        sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else None
    except ValueError:
        raise ConfigError(f"bench scale --sizes {args.sizes!r}: give client counts, e.g. 100,1000") from None
    if sizes is not None and min(sizes, default=0) < 10:
        raise ConfigError(f"bench scale --sizes {args.sizes!r}: every size needs at least 10 clients")
    if args.rounds < 2 or args.degree <= 0:
        raise ConfigError("bench scale: --rounds must be >= 2 and --degree > 0")
    out = Path(args.out)
    _adopt_unmarked(out, SCALE_OUTPUTS)
    with claim(out, reuse=True, kind=SCALE_KIND):  # new, empty, or an earlier bench scale's
        check_replaceable(out, SCALE_OUTPUTS)  # (never a file of yours)
        record_owned(out, SCALE_OUTPUTS)
        chosen = sizes or (QUICK_SIZES if args.quick else SIZES)
        result = run_scale(out, problems, chosen, args.rounds, args.degree, args.timeout)
    print(report(result))
    print(f"results: {Path(args.out) / 'scale.json'}, plot: {Path(args.out) / 'scale.png'}")
    return 1 if any("failed" in p for p in result["points"]) else 0


def _adopt_unmarked(out: Path, outputs: tuple[str, ...]) -> None:
    """Mark ``out`` as a bench-scale folder when it is one from before markers: unmarked, and
    holding only ``outputs`` that its ledger says sheaf-fmtl wrote (anything else is left to
    :func:`claim` to refuse)."""
    if not out.is_dir() or out.is_symlink() or is_marked(out):
        return
    entries = {p.name for p in out.iterdir() if p.name != LEDGER}
    if entries and entries <= set(outputs) & owned_names(out):
        mark(out, SCALE_KIND)


def _add_scale_parser(p: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="bench_kind", metavar="{scale}")
    s = kinds.add_parser(
        "scale", help="default Sheaf-FMTL from 100 to 100,000 clients: time, start-up and memory"
    )
    s.add_argument("--out", default="runs/bench-scale", help="folder for scale.json and scale.png")
    s.add_argument("--quick", action="store_true", help="100, 1,000 and 4,000 clients only")
    s.add_argument("--sizes", default="", help="comma list of client counts (default 100,1000,10000,100000)")
    s.add_argument("--problems", default="synthetic,school-shaped", help="synthetic, school-shaped")
    s.add_argument("--rounds", type=int, default=10, help="rounds timed at each size (default 10)")
    s.add_argument("--degree", type=float, default=8.0, help="mean degree of the Erdos-Renyi graph")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds a size may take (default 3600)")
    s.set_defaults(func=cmd_bench_scale)


def _checked_device(name: str) -> str:
    """``name`` if it is a device this machine has (ConfigError / ValueError, one line, otherwise)."""
    from ..runtime.engine.simulate import resolve_device

    return resolve_device(RunConfig(device=name).device)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("bench", help="time Sheaf-FMTL rounds against the memory-bandwidth floor")
    p.add_argument(
        "--quick", action="store_true", help="shrink the paper-scale setting to a few hundred MB of maps"
    )
    add_config_options(
        p, config_file=False, sets=False, flags=("device",), out=None, quiet=False, overwrite=False
    )
    p.add_argument("--out", default="runs/bench", help="folder for bench.json and scaling.png")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument(
        "--largest",
        action="store_true",
        help="only the paper's largest setting: R-MNIST scale, gamma 0.03, bfloat16 maps (~17 GiB)",
    )
    p.add_argument("--smoke", action="store_true", help="tiny settings that finish in seconds (for tests)")
    p.add_argument(
        "--settings",
        default="",
        help="comma list of settings to run instead of the default ones: small, paper, paper-quick, "
        "paper-g0.03 (gamma 0.03, float32 maps, ~35 GiB: a large GPU), paper-g0.03-bf16, small-smoke, "
        "cnn-smoke",
    )
    p.add_argument(
        "--cohort-models",
        default="cnn",
        help="cohort gradient benchmarks, separated by ';': an architecture (cnn, cnn-small, "
        "cnn-medium, cnn-large) or a comma list assigned round-robin, e.g. 'cnn;cnn-small,cnn-large'; "
        "'none': no cohort benchmark",
    )
    p.add_argument("--no-scaling", action="store_true", help="skip the scaling sweep (and its plot)")
    p.add_argument(
        "--map-init-on-device",
        action="store_true",
        help="draw the settings' Gaussian maps on the device (timing only; the library draws each map "
        "on the CPU, minutes for tens of GiB)",
    )
    p.add_argument(
        "--map-kernels",
        action="store_true",
        help="also time each way to take the map products on one stack of paper-shape maps (1.45 GiB)",
    )
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="record a failing setting or cohort benchmark and run the rest (exit status 1 at the end)",
    )
    p.set_defaults(func=cmd_bench)
    _add_scale_parser(p)
