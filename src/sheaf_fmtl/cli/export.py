"""``sheaf-fmtl export``: a finished run's client models and their preprocessing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_export(args: argparse.Namespace) -> int:
    from ..export import export

    for path in export(args.run, args.out, model=args.model, round=args.round, programs=not args.no_programs):
        print(f"export: {path}")
    return 0


def _add_model_and_round(p: Any) -> None:
    """``--model`` and ``--round``, read alike by ``export`` and ``evaluate``."""
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


def add_export_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="write a finished run's client models and their preprocessing")
    p.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    p.add_argument(
        "--out", required=True, help="a new or empty folder for client-IIIII.pt(2) and preprocessing.json"
    )
    _add_model_and_round(p)
    p.add_argument(
        "--no-programs",
        action="store_true",
        help="write the state_dicts only, not the client-IIIII.pt2 programs (torch.export, preprocessing "
        "folded in) that load without the model's code",
    )
    p.set_defaults(func=cmd_export)


def cmd_evaluate(args: argparse.Namespace) -> int:
    import json

    from ..config import ConfigError, read_config_file
    from ..export import load
    from ..score_objects import held_objects

    saved = Path(args.run) / "config.yaml"
    held = held_objects(read_config_file(saved)) if saved.is_file() else []
    if held:  # (before --model: naming the model would not do)
        raise ConfigError(
            f"{args.run}: the run was made from Python objects ({', '.join(held)}), which no file holds and "
            "the command line cannot give again; score it in Python, with "
            "sheaf_fmtl.load(RUN, model=..., data=...).evaluate()"
        )
    trained = load(args.run, model=args.model, round=args.round)
    scored = trained.evaluate(
        args.split, trust_plugins=args.trust_plugins, data_dir=args.data_dir, device=args.device
    )
    if args.json:
        print(json.dumps(scored))
        return 0
    which = "final models" if scored["round"] is None else f"best models (round {scored['round']})"
    value = "n/a" if scored["mean"] is None else f"{scored['mean']:.4f}"
    late = f" ({scored['not_joined']} not joined yet)" if scored["not_joined"] else ""
    print(
        f"evaluate: {args.run}: {which}: mean {scored['split']} {scored['metric']} = {value} over "
        f"{scored['clients']} of {len(scored['per_client'])} clients{late}"
    )
    return 0


def add_evaluate_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "evaluate", help="score a finished run's models on its test (or validation) split"
    )
    p.add_argument("run", metavar="RUN_DIR", help="a finished run folder")
    _add_model_and_round(p)
    p.add_argument(
        "--split",
        choices=("test", "validation"),
        default="test",
        help="the split scored (validation: the split a run with validation > 0 held out; the training "
        "data and their standardisation are the run's either way)",
    )
    p.add_argument(
        "--trust-plugins",
        action="store_true",
        help="import the module:function code (data, loss, metric) the run's config.yaml names",
    )
    p.add_argument("--data-dir", default=None, help="where the data lie now, if not where the run read them")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    p.set_defaults(func=cmd_evaluate)
