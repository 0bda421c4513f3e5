"""``sheaf-fmtl run``: one experiment into a run folder, ``--seeds`` (one run per seed and their
aggregate), ``--resume`` (continue a stopped run) and ``--help-keys``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..commandline import UsageError, add_config_options, config_keys
from ..runtime.run.stopping.interrupt import StopRequest, stopped_status


def _default_out(algorithm: str, dataset: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = {
        name: text.replace(":", "_").replace("/", "_") for name, text in (("d", dataset), ("a", algorithm))
    }
    return Path("runs") / f"{safe['d']}-{safe['a']}-{stamp}"


def cmd_run(args: argparse.Namespace) -> int:
    from ..api import trust_without_resume
    from ..config import load_config
    from ..experiments import cli as experiments_cli
    from ..runtime.run.launching.launch import launch, summary_of
    from ..scenarios import build

    if args.trust_plugins and not args.resume:
        raise UsageError(trust_without_resume())
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
    summary = summary_of(launch(config, out, progress=not args.quiet, overwrite=args.overwrite, build=build))
    return 0 if summary is None else _report(summary, out)  # None: a rank other than 0


def _resume(args: argparse.Namespace, build: Any) -> dict[str, Any] | None:
    """``run --resume RUN_DIR [--set KEY=VALUE ...]``: continue a stopped run in its own folder (over
    as many processes as it ran on)."""
    from ..api import resume_with
    from ..runtime.run.launching.launch import Resume, launch, summary_of

    options = [
        ("config", args.config),
        ("out", args.out),
        ("seeds", args.seeds),
        ("overwrite", args.overwrite),
    ]
    given = [name for name, value in options if value]
    if given:
        raise UsageError(resume_with(given[0]))
    resume = Resume(args.set, config_keys(args), trust=args.trust_plugins)
    return summary_of(launch(resume, Path(args.resume), progress=not args.quiet, build=build))


def _report(summary: dict[str, Any], out: Path) -> int:
    """Print a run's summary lines; the exit status (128 + the signal when it was stopped)."""
    from ..metrics.results import format_summary, interrupted_line, interrupted_status

    print(format_summary(summary, out))
    if summary["status"] == "interrupted":
        print(interrupted_line(summary, out), file=sys.stderr)
        return interrupted_status(summary)
    return 0


class _HelpKeys(argparse.Action):
    """``--help-keys``: print every config key (type, default, allowed values, doc) and exit."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        from .. import algorithms  # noqa: F401 - registers the choices of 'algorithm' and 'maps'
        from ..config import reference

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
