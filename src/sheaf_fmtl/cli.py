"""``sheaf-fmtl``: run one experiment, the demo, plots, datasets and the benchmark.

Every subcommand that takes a config reads ``[CONFIG.yaml] [--set KEY=VALUE ...]`` plus the common
keys as flags (``--data-dir``, ``--clients``, ``--seed``, ``--device``); errors are one line,
``sheaf-fmtl: error: ...``, exit status 2 (1 for a diverged run, 130/143 when stopped by
SIGINT/SIGTERM).

Why one module over 300 lines: the table of commands (built lazily, so ``--help`` imports no torch),
each command's entry and the one place that turns every error into its one line read together."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._version import __version__
from .cli_options import PROG, Parser, UsageError, add_config_options, config_keys, error_line
from .runtime.run.interrupt import SecondSignal, StopRequest, stopped_status


def _default_out(algorithm: str, dataset: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{dataset.replace(':', '_').replace('/', '_')}-{algorithm}-{stamp}"


def cmd_run(args: argparse.Namespace) -> int:
    from .config import load_config
    from .experiments import cli as experiments_cli
    from .runtime.run.launch import run_any
    from .scenarios import build

    if args.trust_plugins and not args.resume:
        raise UsageError("--trust-plugins applies to --resume RUN_DIR (a config you give is imported anyway)")
    if args.resume:
        resumed = _resume(args, build)
        return 0 if resumed is None else _report(resumed, Path(args.resume))  # None: a rank other than 0
    config = load_config(args.config, args.set, config_keys(args))
    out = Path(args.out) if args.out else _default_out(config.algorithm, config.dataset)
    if args.seeds:
        seeds = experiments_cli.parse_seeds(args.seeds)
        if args.overwrite:
            raise UsageError("--seeds continues what OUT holds (finished seeds are reused); drop --overwrite")
        with StopRequest() as stop:  # a signal: the current seed stops, then the command
            experiments_cli.run_seeds(config, seeds, out, progress=not args.quiet)
        if (out / "aggregate.md").is_file():
            print((out / "aggregate.md").read_text().rstrip())
        return stopped_status(stop.signum, "run --seeds", out)
    summary = run_any(config, out, progress=not args.quiet, overwrite=args.overwrite, build=build)
    return 0 if summary is None else _report(summary, out)  # None: a rank other than 0


def _resume(args: argparse.Namespace, build: Any) -> dict[str, Any] | None:
    """``run --resume RUN_DIR [--set KEY=VALUE ...]``: continue a stopped run in its own folder (over
    as many processes as it ran on)."""
    from .runtime.run.launch import resume_any

    options = [("CONFIG", args.config), ("--out", args.out), ("--seeds", args.seeds)]
    options.append(("--overwrite", args.overwrite))
    given = [name for name, value in options if value]
    if given:
        raise UsageError(f"--resume continues RUN_DIR with its own config and folder; drop {given[0]}")
    keys = config_keys(args)
    return resume_any(
        Path(args.resume), args.set, keys, progress=not args.quiet, build=build, trust=args.trust_plugins
    )


def _report(summary: dict[str, Any], out: Path) -> int:
    """Print a run's summary lines; the exit status (128 + the signal when it was stopped)."""
    from .metrics.results import format_summary, interrupted_line, interrupted_status

    print(format_summary(summary, out))
    if summary["status"] == "interrupted":
        print(interrupted_line(summary, out), file=sys.stderr)
        return interrupted_status(summary)
    return 0


class _HelpKeys(argparse.Action):
    """``--help-keys``: print every config key (type, default, allowed values, doc) and exit."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        from . import algorithms  # noqa: F401 - registers the choices of 'algorithm' and 'maps'
        from .config import reference

        print(reference.text(), end="")
        parser.exit()


def add_run_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run one experiment into a run folder")
    add_config_options(p, out="run folder (new or empty; default runs/DATASET-ALGORITHM-TIME)")
    p.add_argument(
        "--help-keys", nargs=0, action=_HelpKeys, help="list every config key: type, default, allowed values"
    )
    p.add_argument(
        "--seeds",
        default="",
        metavar="SEEDS",
        help="run once per seed (0,1,2 or 0-4) into OUT/seedS and write OUT/aggregate.{json,md}",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the stopped run RUN_DIR from its last checkpoint (only --set rounds=... and keys "
        "that leave the mathematics alone may be given)",
    )
    p.add_argument(
        "--trust-plugins",
        action="store_true",
        help="with --resume: import the module:function plug-ins RUN_DIR/config.yaml names (by default "
        "only those you name again with --set)",
    )
    p.set_defaults(func=cmd_run)


def cmd_demo(args: argparse.Namespace) -> int:
    """The config's problem (``configs/demo.yaml``: the built-in ``synthetic-clusters``): Sheaf-FMTL
    with learned random maps, Sheaf-FMTL with feature-aware fixed maps and local training on it; for
    ``synthetic-clusters`` also Sheaf-FMTL (fixed shared random maps), dFedU and local training on
    its homogeneous variant. Then one figure (``demo.png``) and ``demo.json``."""
    import torch

    from .demo import run_demo

    # The demo's models have at most a few dozen parameters: one thread is fastest, and idle
    # worker threads spinning on busy cores slowed its rounds tenfold or more in our runs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_demo(
            args.config,
            args.set,
            Path(args.out),
            quiet=args.quiet,
            overwrite=args.overwrite,
            flags=config_keys(args),
        )
    finally:
        torch.set_num_threads(threads)


def add_demo_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="Sheaf-FMTL vs local training and dFedU on the built-in problem, with plots"
    )
    add_config_options(p, out="output folder (default runs/demo)")
    p.set_defaults(func=cmd_demo, out="runs/demo")


def cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_runs
    from .runtime.run.ledger import record_owned
    from .runtime.run.rundir import check_replaceable

    if args.out is not None:  # a figure never replaces a file of yours of the same name
        check_replaceable(args.out, _figure_names(args.runs))
    written = plot_runs(args.runs, args.out)
    if args.out is not None:
        record_owned(args.out, [p.name for p in written])
    for path in written:
        print(f"plot: {path}")
    return 0


def _figure_names(runs: list[str]) -> list[str]:
    """Every file name ``plot`` may write for ``runs`` (:func:`sheaf_fmtl.plots.plot_runs`)."""
    from .plots.style import FORMATS

    names = [Path(r).name for r in runs] + [f"{i}_{Path(r).name}" for i, r in enumerate(runs)]
    per_run = [f"{kind}_{n}" for kind in ("map_norms", "edge_weights") for n in names]
    stems = ["metric_vs_rounds_and_bits", *per_run]
    return [f"{stem}.{fmt}" for stem in stems for fmt in FORMATS]


def add_plot_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("plot", help="plot recorded runs")
    p.add_argument("runs", nargs="+", help="run folders")
    p.add_argument("--out", help="folder for the figures (default, for a single run: its folder)")
    p.set_defaults(func=cmd_plot)


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export

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


def _add_data_parser(subparsers: Any) -> None:
    from . import cli_data

    cli_data.add_parser(subparsers)


def _add_bench_parser(subparsers: Any) -> None:
    from .bench import cli as bench_cli

    bench_cli.add_parser(subparsers)


def _add_experiments_parsers(subparsers: Any) -> None:
    from .experiments import cli as experiments_cli

    experiments_cli.add_parser(subparsers)  # reproduce, table


def _add_sweep_parser(subparsers: Any) -> None:
    from .experiments import sweep_cli

    sweep_cli.add_parser(subparsers)


#: Every subcommand, as a function adding its parser (``add_parser(subparsers)``), in help order.
#: Each imports its module only when called: ``sheaf-fmtl --help`` imports no torch.
REGISTRARS: list[Callable[[Any], None]] = [
    add_run_parser,
    add_demo_parser,
    add_plot_parser,
    add_export_parser,
    _add_data_parser,
    _add_bench_parser,
    _add_experiments_parsers,
    _add_sweep_parser,
]

#: Every subcommand's one-line help (``sheaf-fmtl --help``), and the registrar that adds its parser:
#: only the command given is built in full (a test checks these lines against the parsers).
COMMANDS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "run": ("run one experiment into a run folder", add_run_parser),
    "demo": ("Sheaf-FMTL vs local training and dFedU on the built-in problem, with plots", add_demo_parser),
    "plot": ("plot recorded runs", add_plot_parser),
    "export": ("write a finished run's client models and their preprocessing", add_export_parser),
    "data": ("list, describe and fetch datasets", _add_data_parser),
    "bench": ("time Sheaf-FMTL rounds against the memory-bandwidth floor", _add_bench_parser),
    "reproduce": ("run one of the paper's experiments, tables beside the paper's", _add_experiments_parsers),
    "table": ("Markdown/CSV table of run folders (seeds grouped)", _add_experiments_parsers),
    "sweep": ("grid search on a validation split; writes the best config", _add_sweep_parser),
}


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The command line's parser: every subcommand in full (``command="*"``), or only ``command``
    in full and the others by name and help line (``None``: none in full; what ``--help`` needs)."""
    parser = Parser(
        prog=PROG,
        description="Decentralized federated multi-task learning with cellular sheaves (Sheaf-FMTL).",
        epilog="Config keys: [CONFIG.yaml] --set KEY=VALUE [KEY=VALUE ...] ('run --help-keys' lists them); "
        f"'{PROG} COMMAND --help' for each command's options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command == "*":
        for register in REGISTRARS:
            register(sub)
        return parser
    full = COMMANDS[command][1] if command in COMMANDS else None
    done: set[Callable[[Any], None]] = set()
    for name, (text, register) in COMMANDS.items():
        if register is full:
            if register not in done:
                register(sub)
                done.add(register)
        else:
            sub.add_parser(name, help=text)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def _config_from_sets(args: argparse.Namespace) -> None:
    """``--set a=b CONFIG.yaml``: ``--set`` took every word after it; a word without ``=`` that
    names a YAML file (or an existing file) is the config file when none was given before."""
    sets, config = getattr(args, "set", None), getattr(args, "config", "")
    if not sets or config is not None:
        return
    files = [s for s in sets if "=" not in s and (s.endswith((".yaml", ".yml")) or Path(s).is_file())]
    if len(files) == 1:
        args.config = files[0]
        args.set = [s for s in sets if s != files[0]]


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Warnings as one line, ``sheaf-fmtl: warning: ...`` (not Python's file:line + source form)."""
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status (errors: one line on stderr)."""
    shown = warnings.showwarning
    warnings.showwarning = _warning_line
    if getattr(signal.getsignal(signal.SIGINT), "start_up", False):  # started: Ctrl-C as usual
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_command(words)).parse_args(words)
        _config_from_sets(args)
        from . import algorithms  # noqa: F401 - registers what configs are checked against (after --help)

        return int(args.func(args) or 0)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    except (UsageError, ValueError, OSError) as e:  # ConfigError, DatasetError, bad --out, ...
        print(error_line(e), file=sys.stderr)
        return 2
    except RuntimeError as e:  # divergence: metrics up to the last good round are kept
        print(error_line(e), file=sys.stderr)
        return 1
    except SecondSignal as e:  # a second signal while the first was being honoured
        print(f"{PROG}: stopped at once by a second {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + int(e.signum)
    except KeyboardInterrupt:  # before or after the round loop (it stops cleanly by itself)
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = shown


def entry() -> None:
    """The ``sheaf-fmtl`` program: :func:`main`, then exit with its status. A rank of a process group
    leaves with ``os._exit`` once its exit handlers have run and its output is flushed: in the
    interpreter's own exit, the destructors of the communication library's threads can abort a rank
    that has finished its run (SIGABRT, ``terminate called without an active exception``, seen under
    CPU load), which its launcher would report as a lost rank."""
    code = main()
    if _is_rank():
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _is_rank() -> bool:
    """This process was started as a rank and has loaded ``torch.distributed``."""
    return "torch.distributed" in sys.modules and "RANK" in os.environ and "WORLD_SIZE" in os.environ


if __name__ == "__main__":
    entry()
