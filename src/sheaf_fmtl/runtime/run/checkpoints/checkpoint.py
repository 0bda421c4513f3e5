"""Resumable checkpoints of a run folder, written atomically and in the background.

Layout: ``RUN/checkpoints/round-00000040/`` holds one shard per process (``shard-00000.pt``: that
process's state, random streams, transport counters and sample counts; :func:`write_shard`) and
``manifest.json`` (the round, the shard names with their sizes and SHA-256, a digest of the run's
config, the metrics rows and the last evaluation so far; :func:`write_manifest`), written last,
once every shard is there. Across machines with their own disks each ``--out`` holds the shards
of the ranks that write it and its own manifest, which lists them (``held``; :mod:`..disks`); the
checkpoint is complete once every folder's manifest is written, and only then are the earlier
ones removed. A checkpoint is complete only when its manifest exists; a leftover
temporary file or a folder without a manifest (a write cut short) is ignored, and the previous
complete checkpoint (kept until the next one is complete) is used. A manifest or shard that cannot
be trusted is refused (:mod:`.integrity`). Every file is written to a temporary name in its folder,
flushed, fsynced and renamed (``os.replace``).

Cost: the run stops only for :func:`.shard.snapshot`, host copies of the small parts of its state (models,
messages, pending rank-one factors, random streams); the restriction maps, which change in place
only when the deferred rank-one steps are folded in (:mod:`sheaf_fmtl.sheaf.deferred`), are written
from the run's own tensors, and a fold waits for the write in flight. The write (``torch.save`` +
fsync) runs in a background thread while the rounds go on, one at a time (a checkpoint due while the
previous one is still being written waits for it).

Reading checkpoints back: :mod:`.checkpoint_read`; what one shard holds (:func:`.shard.snapshot`,
:func:`.shard.restore`): :mod:`.shard`.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ....metrics.final import file_digest, save_state
from ..folder.rundir import CHECKPOINTS
from .integrity import (
    FORMAT,
    MANIFEST,
    ROUND_DIR,
    config_digest,
    run_config,
    sidecar,
)

if TYPE_CHECKING:
    pass


def rank_and_world() -> tuple[int, int]:
    """``(rank, processes)`` of this run: from the ``torch.distributed`` group, ``(0, 1)`` without."""
    from ...silonet.session import current

    silo = current()
    if silo is not None:
        return silo.rank, silo.world
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_name(rank: int) -> str:
    return f"shard-{rank:05d}.pt"


def round_dir(run_dir: Path, round_: int) -> Path:
    return run_dir / CHECKPOINTS / f"round-{round_:08d}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory handles
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Any) -> None:
    """``write(file)`` into a temporary file beside ``path``, flushed and fsynced, then renamed
    onto ``path`` (a reader sees the old file or the whole new one, never a part)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def write_shard(run_dir: Path, round_: int, shard: dict[str, Any], rank: int = 0) -> Path:
    """Write process ``rank``'s shard of the checkpoint of round ``round_``; returns its folder."""
    folder = round_dir(run_dir, round_)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / shard_name(rank)
    atomic_write(path, lambda f: save_state(shard, f))  # (a full disk: its OSError)
    digest = json.dumps(file_digest(path)).encode()  # gathered into the manifest
    atomic_write(sidecar(path), lambda f: f.write(digest))
    return folder


def write_manifest(
    run_dir: Path,
    round_: int,
    manifest: dict[str, Any],
    world: int = 1,
    held: list[int] | None = None,
    prune: bool = True,
) -> Path:
    """Complete the checkpoint of round ``round_`` once the ``world`` shards are written (in several
    processes: after a barrier, by one of them): the manifest, then (``prune``) every checkpoint
    folder of an earlier round is removed (a later one may be a shard being written by another
    process). ``held``: the ranks whose shards this folder holds (default all; only their
    digests are read, from this folder). Returns the checkpoint folder."""
    folder = round_dir(run_dir, round_)
    shards = [shard_name(r) for r in range(world)]
    here = [shard_name(r) for r in (range(world) if held is None else held)]
    files = {name: json.loads(sidecar(folder / name).read_text()) for name in here}
    body = {**manifest, "format": FORMAT, "round": round_, "shards": shards, "files": files}
    if here != shards:
        body["held"] = here
    config = run_config(run_dir)
    if config is not None:  # what a resume checks config.yaml against
        body.update(config=config, config_sha256=config_digest(config))
    text = json.dumps(body, indent=1, default=float)  # numbers as repr: they read back exactly
    atomic_write(folder / MANIFEST, lambda f: f.write(text.encode()))
    if prune:
        remove_earlier(run_dir, round_)
    return folder


def remove_earlier(run_dir: Path, round_: int) -> None:
    """Remove the checkpoint folders of rounds before ``round_`` (a complete checkpoint)."""
    for other in (run_dir / CHECKPOINTS).iterdir():
        found = ROUND_DIR.fullmatch(other.name)
        if found and int(found.group(1)) < round_ and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)


def write_checkpoint(run_dir: Path, round_: int, shard: dict[str, Any], manifest: dict[str, Any]) -> Path:
    """The checkpoint of a run in one process: its one shard, then the manifest."""
    write_shard(run_dir, round_, shard)
    return write_manifest(run_dir, round_, manifest)


def remove_checkpoints(run_dir: Path, keep: Path | None = None) -> None:
    """Remove the run's checkpoint folders (all of them, or all but ``keep`` and the earlier
    complete ones: across machines a rank may have to resume from one, :mod:`..disks`)."""
    base = run_dir / CHECKPOINTS
    if not base.is_dir():
        return
    if base.is_symlink():
        return
    for p in base.iterdir():
        if keep is not None and _earlier_complete(p, keep):
            continue
        if p != keep and not p.is_symlink() and (ROUND_DIR.fullmatch(p.name) or p.name.startswith(".")):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if keep is None and not any(base.iterdir()):
        base.rmdir()


def _earlier_complete(p: Path, than: Path) -> bool:
    found, ref = ROUND_DIR.fullmatch(p.name), ROUND_DIR.fullmatch(than.name)
    if not found or not ref or int(found.group(1)) >= int(ref.group(1)) or p.is_symlink():
        return False
    return (p / MANIFEST).is_file()


class CheckpointWriter:
    """Writes checkpoints of one run folder in a background thread, one at a time.

    In one process the thread writes the shard and then the manifest. Across ``world`` processes
    each rank's thread writes its own shard (:func:`write_shard`); the checkpoint is completed by
    :meth:`complete` on the main thread of every rank (collectives cannot run in the writer thread):
    each joins its write, the ranks agree that every shard is there (``agree``, one all-reduce), and
    the leader of each run folder (rank 0 for one shared folder) writes its manifest; once every
    folder's manifest is written (a second agreement), the earlier checkpoints are removed. The
    round loop calls :meth:`complete` after the first round at
    whose end no rank's write was in flight (:meth:`.simulate.Simulation.finite` all-reduces that
    flag with its own); :meth:`save` completes a previous checkpoint still pending first, and a
    stop by a signal completes its checkpoint at once (``wait=True``).

    Args:
        run_dir: the run folder (``None``: a run in memory; nothing is written).
        rank: this process's rank; ``world``: the number of processes.
        agree: across processes, ``agree(failed)``: whether any rank's shard write failed (a
            collective: every rank calls it at the same point).
    """

    def __init__(
        self,
        run_dir: str | Path | None,
        rank: int = 0,
        world: int = 1,
        agree: Callable[[bool], bool] | None = None,
    ) -> None:
        self.dir = None if run_dir is None else Path(run_dir)
        self.rank, self.world, self.agree = rank, world, agree
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._pending: tuple[int, dict[str, Any]] | None = None  # shards in flight, no manifest yet
        self.written: list[Path] = []
        self.ranks = [rank]  # the ranks writing into run_dir (:func:`..disks.folder_ranks`); set by the run

    def save(self, round_: int, shard: dict[str, Any], manifest: dict[str, Any], wait: bool = False) -> None:
        """Write ``shard`` (host copies, not touched by the run afterwards) and ``manifest`` as the
        checkpoint of round ``round_``; in the background unless ``wait``."""
        if self.dir is None:
            return
        self.complete()
        run_dir, rank, sharded = self.dir, self.rank, self.world > 1

        def work() -> None:
            try:
                if sharded:
                    write_shard(run_dir, round_, shard, rank)
                else:
                    self.written.append(write_checkpoint(run_dir, round_, shard, manifest))
            except BaseException as e:  # noqa: BLE001 - raised again by wait() / complete()
                self._error = e

        self._thread = threading.Thread(target=work, name=f"checkpoint-{round_}", daemon=True)
        self._thread.start()
        if sharded:
            self._pending = (round_, manifest)
        if wait:
            self.complete()

    @property
    def pending(self) -> bool:
        """Across processes: a checkpoint whose manifest is not written yet (see :meth:`complete`)."""
        return self._pending is not None

    @property
    def busy(self) -> bool:
        """A write is in flight."""
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        """Wait for this process's write in flight (its error, if any, is kept for :meth:`wait`)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        """Wait for the write in flight; raise its error (OSError: disk full, ...) if it failed."""
        self.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def complete(self) -> None:
        """Finish the checkpoint in flight: in one process :meth:`wait`; across processes (on every
        rank at the same point) join this rank's shard write, agree that every rank's succeeded,
        and write the manifest on rank 0. Raises the shard write's error on the rank that had it,
        and OSError on the others."""
        if self._pending is None:
            self.wait()
            return
        (round_, manifest), self._pending = self._pending, None
        self.join()
        failed = self.agree(self._error is not None) if self.agree is not None else self._error is not None
        self.wait()
        if failed:
            raise OSError(f"the checkpoint of round {round_} could not be written by another rank")
        leads = self.leads and self.dir is not None
        error: BaseException | None = None
        if leads:
            assert self.dir is not None
            try:
                held = None if len(self.ranks) == self.world else self.ranks
                self.written.append(write_manifest(self.dir, round_, manifest, self.world, held, prune=False))
            except OSError as e:
                error = e
        failed = self.agree(error is not None) if self.agree is not None else error is not None
        if error is not None:
            raise error
        if failed:
            raise OSError(f"the manifest of round {round_} could not be written by another rank")
        if leads:
            assert self.dir is not None
            remove_earlier(self.dir, round_)  # every folder's manifest of round_ is written

    @property
    def leads(self) -> bool:
        """This rank writes its run folder's manifests (the lowest rank writing there)."""
        return self.rank == min(self.ranks)
