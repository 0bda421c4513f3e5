"""Which ranks of a process group write into the same run folder: one shared ``--out`` (one
machine, or a network file system), or each machine's own ``--out`` on its own disk.

Each rank is given its ``--out``; the ranks find out which of them see the same folder
(:func:`folder_ranks`, a collective: rank 0 draws a fresh random token, every rank writes it
into its folder under its own name, and reads back which ranks' names it finds there with that
token). A folder's lowest rank leads it: it writes that folder's checkpoint manifests, listing the
shards the folder holds (:mod:`.checkpoints.checkpoint`); a leader other than rank 0 also gives its folder the
run folder's marker and ``config.yaml``, so that ``run --resume`` on that machine finds its run.
No rank ever reads a file another machine wrote: a resume reads each rank's shard from its own
folder, and the ranks agree on the round to resume from (:func:`common_checkpoint`).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ...config import RunConfig, save_config
from ...data import preprocessing
from ...data.base import DatasetError, FederatedDataset
from .checkpoints.integrity import ROUND_DIR, CheckpointError, check_manifest
from .folder.clearing import prepare_out_dir
from .folder.folderlock import FolderError
from .folder.recorder import software_versions

TOKEN = ".sheaf-fmtl-rank-{:05d}"  # a rank's token file, removed again once read
PIECE = ".preprocessing-rank-{:05d}.json"  # a rank's preprocessing record, combined by its folder's lead


def folder_ranks(out: Path, comm: Any, rank: int, world: int) -> list[int]:  # noqa: ANN401 - the transport
    """The ranks whose ``--out`` is the folder this rank writes, ``out`` (a collective)."""
    token = int(comm.all_max(torch.tensor(secrets.randbits(62) if rank == 0 else 0, dtype=torch.int64)))
    out.mkdir(parents=True, exist_ok=True)
    mine = out / TOKEN.format(rank)
    mine.write_text(str(token))
    comm.all_sum(torch.zeros(1))  # every rank's token is written
    ranks = []
    for r in range(world):
        with contextlib.suppress(OSError):
            if (out / TOKEN.format(r)).read_text() == str(token):
                ranks.append(r)
    comm.all_sum(torch.zeros(1))  # every rank has read
    mine.unlink(missing_ok=True)
    return ranks


def common_checkpoint(folder: Path, run_dir: Path, comm: Any) -> Path:  # noqa: ANN401 - the transport
    """The checkpoint folder of ``run_dir`` every rank resumes from (a collective): ``folder`` when
    every rank's last complete checkpoint has its round; else the earliest of those rounds, which a
    rank whose checkpoint is later still keeps (a run stopped between the folders' manifests).

    Raises:
        CheckpointError: the ranks' checkpoints differ and the earliest round is not complete in
            every rank's folder (on every rank, in one line).
    """
    found = ROUND_DIR.fullmatch(folder.name)
    mine = int(found.group(1)) if found else -1
    both = comm.all_max(torch.tensor([mine, -mine], dtype=torch.int64)).tolist()
    latest, earliest = int(both[0]), -int(both[1])
    if latest == earliest:
        return folder
    candidate = folder.with_name(f"round-{earliest:08d}") if found else folder
    try:
        ok = check_manifest(candidate) is not None
    except CheckpointError:
        ok = False
    if int(comm.all_max(torch.tensor(int(not ok), dtype=torch.int32))):
        raise CheckpointError(
            f"{run_dir}: the ranks' last complete checkpoints are of rounds {earliest} to {latest}, and "
            f"round {earliest}'s is not complete in every rank's folder; nothing was changed"
        )
    return candidate


def adopt_folder(
    out: Path, config: RunConfig, overwrite: bool, rank: int, leads: bool, agree: Callable[[bool], bool]
) -> None:
    """A rank other than 0 that leads its own ``--out`` (its machine's disk) makes it a run folder:
    the marker and ``config.yaml`` (``config``: as run), what ``run --resume`` there reads. Every
    rank takes part (``agree``: whether any rank failed); a folder that cannot be used is refused
    on every rank, naming it on its own."""
    error: BaseException | None = None
    if rank != 0 and leads:
        try:
            prepare_out_dir(out, overwrite)
            save_config(config, out / "config.yaml", {"versions": software_versions()})
        except (OSError, ValueError) as e:  # FolderError: not empty, not a run folder, a file ...
            error = e
    if agree(error is not None):
        if error is not None:
            raise error
        raise FolderError("another rank's --out cannot be used as its run folder (its error names it)")


def write_preprocessing(out: Path, dataset: FederatedDataset, comm: Any, rank: int, ranks: list[int]) -> None:  # noqa: ANN401
    """``preprocessing.json`` of every rank's folder (a collective): the ranks that share a folder
    (``ranks``, one machine's disk) leave their records there, and its lowest rank combines them,
    each client's standardisation from the rank that read it; no record crosses folders, so a
    client read in another silo is ``elsewhere`` (:func:`sheaf_fmtl.data.preprocessing.combine`)."""
    piece = out / PIECE.format(rank)
    piece.write_text(json.dumps(preprocessing.describe(dataset)))
    comm.all_sum(torch.zeros(1))  # every record is written
    if rank == min(ranks):
        records = [json.loads((out / PIECE.format(r)).read_text()) for r in ranks]
        preprocessing.write(out, preprocessing.combine(records))
    comm.all_sum(torch.zeros(1))  # every record is read
    piece.unlink(missing_ok=True)


def check_preprocessing(out: Path, dataset: FederatedDataset, comm: Any) -> None:  # noqa: ANN401
    """A resume on every rank: the data read now give its folder's ``preprocessing.json`` for the
    clients it holds (a collective; a rank that finds a difference names it, the others stop too)."""
    error: DatasetError | None = None
    try:
        preprocessing.check_same(out, dataset)
    except DatasetError as e:
        error = e
    if int(comm.all_max(torch.tensor(int(error is not None), dtype=torch.int32))):
        raise error or DatasetError(
            "another rank's data differ from those its run started on (its error names them)"
        )
