"""One setting's round benchmark in a fresh interpreter, so that its peak memory is its own."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import torch

from .settings import Setting


def run_setting_subprocess(s: Setting, device: str, threads: int | None = None) -> dict[str, Any]:
    """:func:`~.rounds.run_setting` in a fresh interpreter; its last stdout line is the JSON result.

    Args:
        s: the setting.
        device: ``cpu`` or ``cuda``.
        threads: torch threads in the child (default: this process's).
    Returns:
        The child's result dictionary.
    Raises:
        RuntimeError: the child failed (its traceback went to stderr).
    """
    src = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    code = (
        f"import json, sys, torch; torch.set_num_threads({threads or torch.get_num_threads()}); "
        "from sheaf_fmtl.bench.rounds import run_setting; from sheaf_fmtl.bench.settings import Setting; "
        "a = json.loads(sys.argv[1]); a['feature_shape'] = tuple(a['feature_shape']); "
        "print(json.dumps(run_setting(Setting(**a), sys.argv[2])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(dataclasses.asdict(s)), device],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode == -signal.SIGKILL:
        raise RuntimeError(
            f"benchmark of setting {s.name!r} was killed (SIGKILL), most likely by the out-of-memory "
            "killer; run `sheaf-fmtl bench --quick` (a few hundred MB of maps) or `--settings small`"
        )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark of setting {s.name!r} failed (exit {proc.returncode})")
    return cast("dict[str, Any]", json.loads(proc.stdout.strip().splitlines()[-1]))
