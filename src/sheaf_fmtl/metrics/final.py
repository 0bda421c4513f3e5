"""A run folder's final state, ``checkpoint.pt``, read only as far as its ``summary.json`` vouches
for it: the run records the file's size and SHA-256 in ``summary.json`` (``checkpoint``) right after
writing it, and every reader (``load``, ``export``, plots, a process group's result) checks them
before ``torch.load(..., weights_only=True)``. A file without that record, of another size or digest,
or one that cannot be read is refused in one line naming it; ``finished`` also refuses a run that
stopped before its last round (interrupted or diverged)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import IO, Any

import torch

from ..data.base import DatasetError
from ..data.bounded import read_text_bounded

FINAL = "checkpoint.pt"
SUMMARY = "summary.json"
BEST = "best.pt"  #: the best evaluation's models (early stopping), vouched for by ``summary.json``'s ``best``
#: Files of a run folder whose size and SHA-256 ``summary.json`` records (``files``), checked before export.
VOUCHED = ("config.yaml", "preprocessing.json")
#: ``summary.json`` statuses of a run whose final state holds its trained models: it ended where it
#: meant to, at its last round or at a callback's stop (not :data:`.aggregate.FINISHED`: all rounds run).
TRAINED = ("ok", "stopped")
_CHUNK = 1 << 20


def save_state(obj: object, f: IO[bytes]) -> None:
    """``torch.save(obj, f)`` into the open file ``f``; a write that fails (a full disk, a file size
    limit) raises the OSError that failed it, not torch's ``[enforce fail ...]`` RuntimeError, so
    that the caller can say in one line what happened."""
    try:
        torch.save(obj, f)
    except RuntimeError as e:
        if isinstance(e.__context__, OSError):
            raise e.__context__ from None
        raise


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex digest}`` of the file ``path``."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"bytes": size, "sha256": h.hexdigest()}


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """``run_dir/summary.json`` as a mapping (DatasetError naming it when missing or unreadable)."""
    path = Path(run_dir) / SUMMARY
    try:
        body = json.loads(read_text_bounded(path))
    except FileNotFoundError:
        raise DatasetError(f"{path} is missing: not a finished run folder") from None
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path} cannot be read ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(body, dict):
        raise DatasetError(f"{path} does not hold a JSON object")
    return body


def read_final(run_dir: str | Path, *, finished: bool = True) -> dict[str, Any]:
    """``run_dir/checkpoint.pt``'s payload, checked against ``summary.json`` (see the module
    docstring); with ``finished``, only of a run whose status is in :data:`TRAINED`.

    Raises:
        DatasetError: one line naming the file that is missing, unrecorded, altered or unreadable,
            or the run's status.
    """
    folder = Path(run_dir)
    summary = read_summary(folder)
    status = summary.get("status")
    if finished and status not in TRAINED:
        done = summary.get("rounds_done", summary.get("diverged_at_round"))
        at = f" at round {done} of {summary.get('rounds')}" if done is not None else ""
        raise DatasetError(
            f"{folder}: the run did not finish (status {status!r}{at}); its final state is not the "
            "trained models: resume the run first"
        )
    path = folder / FINAL
    if path.is_symlink() or not path.is_file():
        raise DatasetError(f"{path} is missing: the run did not finish (resume it first)")
    want = summary.get("checkpoint")
    if not isinstance(want, dict) or "sha256" not in want or "bytes" not in want:
        raise DatasetError(
            f"{path} is not vouched for by {folder / SUMMARY} (no size and SHA-256 of it recorded): "
            "not read; run the run again with this version"
        )
    if path.stat().st_size != want["bytes"] or file_digest(path)["sha256"] != want["sha256"]:
        raise DatasetError(
            f"{path} differs from the size and SHA-256 its {SUMMARY} recorded (altered, cut short, or "
            "from another run): not read"
        )
    return _load(path, "a run's final state")


def check_vouched(run_dir: str | Path, summary: dict[str, Any]) -> None:
    """The run folder's ``config.yaml`` and ``preprocessing.json`` are the files its ``summary.json``
    recorded (``files``: size and SHA-256), so that a summary and checkpoint of another run, or an
    edited preprocessing, are never exported as this run's (DatasetError in one line otherwise)."""
    folder = Path(run_dir)
    files = summary.get("files")
    for name in VOUCHED:
        want = files.get(name) if isinstance(files, dict) else None
        _check_digest(folder / name, want, "files")


def read_best(run_dir: str | Path, summary: dict[str, Any]) -> dict[str, Any]:
    """``best.pt``'s payload, checked against ``summary.json``'s ``best`` record (DatasetError in one
    line: missing, not recorded by the run's last part, altered, unreadable)."""
    path = Path(run_dir) / BEST
    if path.is_symlink() or not path.is_file():
        raise DatasetError(
            f"{path} is missing: the run kept no best round (early_stop_patience > 0 keeps one)"
        )
    want = summary.get("best")
    _check_digest(path, want, "best")
    state = _load(path, "a run's models")
    if not isinstance(want, dict) or state.get("round") != want.get("round"):
        raise DatasetError(f"{path} holds another round than its {SUMMARY} recorded: not read")
    return state


def _check_digest(path: Path, want: object, key: str) -> None:
    if path.is_symlink() or not path.is_file():
        raise DatasetError(f"{path} is missing (or a link): not a finished run folder of this version")
    if not isinstance(want, dict) or "sha256" not in want or "bytes" not in want:
        how = (
            "the run's last part kept no best evaluation (resumed without early_stop_patience?): export "
            "--round final"
            if key == "best"
            else "run the run again with this version"
        )
        raise DatasetError(
            f"{path} is not vouched for by {path.parent / SUMMARY} (no size and SHA-256 of it under "
            f"'{key}'): not read; {how}"
        )
    if path.stat().st_size != want["bytes"] or file_digest(path)["sha256"] != want["sha256"]:
        raise DatasetError(
            f"{path} differs from the size and SHA-256 its {SUMMARY} recorded (altered, or from another "
            "run): not read"
        )


def _load(path: Path, what: str) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` as a dict, or DatasetError in one line naming ``what``
    the file should hold."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling, zip and truncation errors alike
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise DatasetError(f"{path} cannot be read with weights_only=True ({first})") from None
    if not isinstance(state, dict):
        raise DatasetError(f"{path} does not hold {what}")
    return state
