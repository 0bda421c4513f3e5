"""What a W&B offline run wrote, read back from its ``run-ID.wandb`` file without W&B's own code:
the file is a LevelDB-style log (a 7-byte header ``:W&B``, magic ``0xBEE1``, version; then 32 KiB
blocks of records, each a 7-byte header, CRC-32C, length, kind, and a chunk of a ``Record``
protobuf), and only the protobuf schema is W&B's (``wandb.proto.wandb_internal_pb2``)."""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    """The ``Record`` protobufs of one ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0), data[:7]
    pos, out, chunks = 7, [], b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header: padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        chunks = chunk if kind in (FULL, FIRST) else chunks + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            out.append(record)
    return out


def _key(item: Any) -> str:  # noqa: ANN401 - a protobuf item
    return "/".join(item.nested_key) if item.nested_key else item.key


@dataclass
class OfflineRun:
    """One offline run's id, config, history rows, summary and exit code."""

    run_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None


def read_offline_run(path: Path) -> OfflineRun:
    """:class:`OfflineRun` from a ``run-ID.wandb`` file."""
    run = OfflineRun()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id = record.run.run_id or run.run_id  # (a later run record may leave it out)
            run.config.update({_key(u): json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            run.config.update({_key(u): json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            run.summary.update({_key(u): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def offline_runs(folder: Path, wait_s: float = 60.0) -> list[OfflineRun]:
    """Every offline run under a W&B folder (``wandb/offline-run-*/run-*.wandb``), oldest first, once
    each file holds its run's exit (W&B's service writes the file after ``finish`` returns)."""
    deadline = time.monotonic() + wait_s
    while True:
        runs = []
        for path in sorted(folder.glob("offline-run-*/run-*.wandb")):
            try:
                runs.append(read_offline_run(path))
            except (AssertionError, ValueError, struct.error):  # (a file still being written)
                runs.append(OfflineRun())
        if all(r.exit_code is not None for r in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(0.1)
