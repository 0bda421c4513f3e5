"""``sheaf-fmtl``: run one experiment, the demo, plots, datasets and the benchmark.

Every subcommand that takes a config reads ``[CONFIG.yaml] [--set KEY=VALUE ...]`` plus the common
keys as flags (``--data-dir``, ``--clients``, ``--seed``, ``--device``); errors are one line,
``sheaf-fmtl: error: ...``, exit status 2 (1 for a diverged run, 130/143 when stopped by
SIGINT/SIGTERM).

This module is the entry point: the table of commands (built lazily, so ``--help`` imports no
torch) and the one place that turns every error into its one line. Each command is a module beside
it (``run``, ``demo``, ``plot``, ``export`` and ``evaluate``, ``data``; ``bench``, ``reproduce``,
``table`` and ``sweep`` live with their packages), and :mod:`sheaf_fmtl.commandline` holds what every
command shares: the config options, the parser class and the error line."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from ..commandline import COMMON_FLAGS, PROG, Parser, UsageError, error_line
from ..heap import keep_freed_pages
from ..runtime.run.stopping.interrupt import SecondSignal
from ..spelling import command_line
from .certs import HELP as CERTS_HELP
from .certs import add_certs_parser
from .demo import add_demo_parser
from .export import add_evaluate_parser, add_export_parser
from .plot import add_plot_parser
from .run import add_run_parser


def _add_data_parser(subparsers: Any) -> None:
    from . import data

    data.add_parser(subparsers)


def _add_bench_parser(subparsers: Any) -> None:
    from ..bench import cli as bench_cli

    bench_cli.add_parser(subparsers)


def _add_experiments_parsers(subparsers: Any) -> None:
    from ..experiments import cli as experiments_cli

    experiments_cli.add_parser(subparsers)  # reproduce, table


def _add_sweep_parser(subparsers: Any) -> None:
    from ..experiments import sweep_cli

    sweep_cli.add_parser(subparsers)


#: Every subcommand, as a function adding its parser (``add_parser(subparsers)``), in help order.
#: Each imports its module only when called: ``sheaf-fmtl --help`` imports no torch.
REGISTRARS: list[Callable[[Any], None]] = [
    add_run_parser,
    add_demo_parser,
    add_plot_parser,
    add_export_parser,
    add_evaluate_parser,
    _add_data_parser,
    _add_bench_parser,
    _add_experiments_parsers,
    _add_sweep_parser,
    add_certs_parser,
]

#: Every subcommand's one-line help (``sheaf-fmtl --help``), and the registrar that adds its parser:
#: only the command given is built in full (a test checks these lines against the parsers).
COMMANDS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "run": ("run one experiment into a run folder", add_run_parser),
    "demo": ("Sheaf-FMTL vs local training and dFedU on the built-in problem, with plots", add_demo_parser),
    "plot": ("plot recorded runs", add_plot_parser),
    "export": ("write a finished run's client models and their preprocessing", add_export_parser),
    "evaluate": ("score a finished run's models on its test (or validation) split", add_evaluate_parser),
    "data": ("list, describe and fetch datasets", _add_data_parser),
    "bench": ("time Sheaf-FMTL rounds against the memory-bandwidth floor", _add_bench_parser),
    "reproduce": ("run one of the paper's experiments, tables beside the paper's", _add_experiments_parsers),
    "table": ("Markdown/CSV table of run folders (seeds grouped)", _add_experiments_parsers),
    "sweep": ("grid search on a validation split; writes the best config", _add_sweep_parser),
    "certs": (CERTS_HELP, add_certs_parser),
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


def _prog(parser: argparse.ArgumentParser, words: Sequence[str]) -> str:
    """The name of the deepest subcommand ``words`` reach (``sheaf-fmtl bench scale``)."""
    for word in words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser.prog


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
        parser = build_parser(_command(words))
        args, extra = parser.parse_known_args(words)
        if extra:  # named with the help of the (sub)command that took the others
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {_prog(parser, words)} --help)")
        _config_from_sets(args)
        from .. import algorithms  # noqa: F401 - registers what configs are checked against (after --help)

        flags = {key: flag for flag, key, _, _ in COMMON_FLAGS if hasattr(args, key)}
        with command_line(flags):  # refusals name --set KEY=VALUE and this command's flags
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
    keep_freed_pages()  # a round's large temporaries reuse heap pages (SHEAF_FMTL_HEAP=system: glibc's)
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
