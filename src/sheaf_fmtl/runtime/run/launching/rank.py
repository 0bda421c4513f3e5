"""One rank of a process group (under ``torchrun``, or started by :mod:`.spawn`): join the group
(``env://`` rendezvous, or the file of ``processes = K``), build only this rank's clients and run
them; a failed or timed-out collective (a peer died or hung) ends the rank with
:class:`RankLostError`, naming the round the group reached. How a run is launched: :mod:`.launch`."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ....config import RunConfig
from ..folder.rundir import claim
from ..stopping import interrupt
from .precheck import check_processes
from .rankenv import STORE_FILE, watch_launcher

if TYPE_CHECKING:
    from ...engine.simulate import Simulation


class RankLostError(RuntimeError):
    """A collective failed or timed out: a peer rank died or hung."""


def join_group(config: RunConfig) -> tuple[int, int]:
    """Join the process group given by the environment, with ``timeout_s`` on every collective;
    under ``transport = tls``, become silo ``silo`` (or ``RANK``) of ``processes`` instead."""
    if config.transport == "tls":
        from ...silonet import session

        rank = config.silo if config.silo is not None else int(os.environ["RANK"])
        session.join(config, rank, config.processes)
        return rank, config.processes
    cuda = config.device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend, timeout = "nccl" if cuda else "gloo", timedelta(seconds=config.timeout_s)
    store = os.environ.get(STORE_FILE)
    if store:  # processes=K: rendezvous through a file, no TCP listener (see spawn)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(
            backend, init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout
        )
    else:  # torchrun: env:// on the rendezvous address it was given
        dist.init_process_group(backend, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def run_rank(
    config: RunConfig,
    out: Path,
    *,
    progress: bool,
    overwrite: bool,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
    resume_from: Path | None = None,
    resuming: bool = False,
) -> dict[str, Any] | None:
    """Run this process's rank to the end; rank 0's summary (``None`` on the other ranks). Every
    rank knows the run folder ``out`` (rank 0 writes it, each rank its checkpoint shards) and runs
    ``callbacks``. ``resuming``: continue the run of ``out`` from ``resume_from`` (its checkpoint;
    ``None``: from round 0), as :func:`.launch.resume_any` decided."""
    from ...engine.simulate import build_simulation
    from ..loop import execute
    from ..stopping.agreement import RoundAgreement

    check_processes(config, data=False)
    watch_launcher()
    rank, world = join_group(config)
    silo = config.transport == "tls"  # (its links are made with the graph: agreed after the build)
    if resuming and not silo:
        resume_from = _common_start(resume_from, out)
    sim = None
    try:
        owned = claim(out, overwrite=overwrite, resume=resuming) if rank == 0 else contextlib.nullcontext()
        with owned, interrupt.leave_summary(out if rank == 0 else None):  # rank 0 writes the run folder
            sim = build_simulation(config, rank_world=(rank, world))
            if resuming and silo:
                resume_from = _common_start(resume_from, out)
            agreement = RoundAgreement(sim)
            interrupt.AGREE = agreement.agree_stop  # every rank stops after the same round
            outcome = execute(
                config,
                out,
                progress=progress and rank == 0,
                sim=sim,
                overwrite=overwrite or resuming,
                resume_from=resume_from,
                callbacks=callbacks,
                agreement=agreement,
            )
    except RuntimeError as e:
        lost = _lost_contact(e, rank, world, sim, config.timeout_s)
        if lost is None:
            raise
        raise lost from None
    finally:
        interrupt.AGREE = None
        if silo:
            from ...silonet import session

            session.leave()
    if not silo:
        dist.destroy_process_group()
    return outcome.summary if rank == 0 else None


def _lost_contact(
    e: RuntimeError, rank: int, world: int, sim: Simulation[Any] | None, timeout_s: float
) -> RankLostError | None:
    """The one line of a collective that failed or timed out (a peer rank died or hung), naming the
    round the group reached; ``None`` for another error."""
    if type(e).__name__ not in ("DistBackendError", "SiloLinkError") and not _is_comm_error(e):
        return None
    reached = sim.transport.faults.round if sim is not None else 0
    return RankLostError(
        f"rank {rank} of {world}: lost contact with the group in round {reached} (a peer rank died "
        f"or stayed silent for timeout_s = {timeout_s:g} s): {_first_line(e)}"
    )


def _common_start(folder: Path | None, out: Path) -> Path | None:
    """A resume's checkpoint, agreed by every rank (a collective): when some ranks' folders hold a
    complete checkpoint and others none (each machine its own ``--out``, a run stopped before every
    folder's first manifest), every rank starts the run again from round 0."""
    from ...silonet.session import current

    silo = current()
    flags = torch.tensor([int(folder is not None), int(folder is None)])
    if silo is not None:
        flags = silo.reduce(flags, "max")
    else:
        flags = flags.to("cuda" if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    if bool(flags[0]) and bool(flags[1]):
        warnings.warn(
            f"{out}: another rank's folder has no complete checkpoint; the run starts again from round 0",
            stacklevel=2,
        )
        return None
    return folder


def _is_comm_error(e: BaseException) -> bool:
    text = str(e).lower()
    return any(w in text for w in ("gloo", "nccl", "connection", "timed out", "timeout", "peer"))


def _first_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    return lines[0][:200] if lines else type(e).__name__
