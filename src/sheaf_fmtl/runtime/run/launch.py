"""Launching a run over several processes: as one rank of ``torchrun``, or ``processes = K`` locally.

- Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` in the environment, e.g. ``torchrun
  --nproc-per-node K -m sheaf_fmtl run CONFIG``), this process is one rank: it joins the group
  (``env://`` rendezvous on the address torchrun was given; Gloo on the CPU, NCCL with
  ``device=cuda``), builds only its clients, and runs; rank 0 writes the run folder and prints,
  every rank writes its shard of each checkpoint (:mod:`.checkpoint`), and ``run --resume``
  continues such a run over as many ranks (:func:`resume_any`).
- ``processes = K`` (no torchrun): the command starts ``K`` such ranks itself, on this machine,
  with a rendezvous through a temporary file (no TCP listener) and Gloo's connections on the
  loopback interface only, and waits for them (the ranks run quietly; rank 0's warnings are shown
  when they end). A rank that dies ends the
  others within ``timeout_s``; the error line names it, and the round the others reached.
- The ranks outlive no launcher: each gets SIGTERM when the process that started it ends (Linux's
  ``PR_SET_PDEATHSIG``; elsewhere a watchdog thread on the parent's pid), so a killed launcher's
  ranks stop after the same round with a checkpoint, as on Ctrl-C. They inherit the run folder's
  lock (:mod:`.rundir`), so ``--resume`` / ``--overwrite`` of the folder are refused while any of
  them lives, and a folder whose ranks ended resumes as usual.

Why one module over 300 lines: starting the ranks, handing them the folder's lock, and resuming
them over as many ranks are one sequence, read top to bottom.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import yaml

from ...config import ConfigError, RunConfig
from . import interrupt
from .precheck import check_processes
from .rankenv import LAUNCHER, STORE_FILE, rank_world, watch_launcher
from .rundir import HELD_ENV, HELD_FD_ENV, claim, held_lock

if TYPE_CHECKING:
    from .loop import RunOutcome

STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # a rank's exit status after a clean stop


class RankLostError(RuntimeError):
    """A collective failed or timed out: a peer rank died or hung."""


def join_group(config: RunConfig) -> tuple[int, int]:
    """Join the process group given by the environment, with ``timeout_s`` on every collective."""
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
    resume_from: Path | None = None,
    resuming: bool = False,
) -> dict[str, Any] | None:
    """Run this process's rank to the end; rank 0's summary (``None`` on the other ranks). Every
    rank knows the run folder ``out``: rank 0 writes it, each rank its checkpoint shards.
    ``resuming``: continue the run of ``out`` from ``resume_from`` (its checkpoint; ``None``: from
    round 0), as :func:`resume_any` decided."""
    from ..engine.simulate import build_simulation
    from .agreement import RoundAgreement
    from .loop import execute

    check_processes(config, data=False)
    watch_launcher()
    rank, world = join_group(config)
    if resuming:
        resume_from = _common_start(resume_from, out)
    sim = None
    try:
        owned = claim(out, overwrite=overwrite, resume=resuming) if rank == 0 else contextlib.nullcontext()
        with owned, interrupt.leave_summary(out if rank == 0 else None):  # rank 0 writes the run folder
            sim = build_simulation(config, rank_world=(rank, world))
            agreement = RoundAgreement(sim)
            interrupt.AGREE = agreement.agree_stop  # every rank stops after the same round
            outcome = execute(
                config,
                out,
                progress=progress and rank == 0,
                sim=sim,
                overwrite=overwrite or resuming,
                resume_from=resume_from,
                agreement=agreement,
            )
    except RuntimeError as e:
        if "DistBackendError" in type(e).__name__ or _is_comm_error(e):
            reached = sim.transport.faults.round if sim is not None else 0
            raise RankLostError(
                f"rank {rank} of {world}: lost contact with the group in round {reached} (a peer rank died "
                f"or stayed silent for timeout_s = {config.timeout_s:g} s): {_first_line(e)}"
            ) from None
        raise
    finally:
        interrupt.AGREE = None
    dist.destroy_process_group()
    return outcome.summary if rank == 0 else None


def _common_start(folder: Path | None, out: Path) -> Path | None:
    """A resume's checkpoint, agreed by every rank (a collective): when some ranks' folders hold a
    complete checkpoint and others none (each machine its own ``--out``, a run stopped before every
    folder's first manifest), every rank starts the run again from round 0."""
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    flags = torch.tensor([int(folder is not None), int(folder is None)], device=device)
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


def _loopback() -> str:
    """The name of the loopback interface (Gloo's connections then bind to 127.0.0.1 only)."""
    names = [name for _, name in socket.if_nameindex()]
    return "lo" if "lo" in names or not names else next((n for n in names if n.startswith("lo")), "lo")


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    config: RunConfig, out: Path, *, progress: bool, overwrite: bool, resume: bool = False
) -> dict[str, Any]:
    """Start ``config.processes`` ranks on this machine, wait for them, return rank 0's summary.
    ``resume``: the ranks continue the stopped run of ``out`` (``run --resume``, the keys of
    :data:`.resume.RESUMABLE_KEYS` as ``config`` has them). What the ranks would refuse is
    refused here first (:func:`.precheck.check_processes`); this process holds the folder's lock,
    and the ranks inherit it (it lasts while any of them lives)."""
    check_processes(config)
    with claim(out, overwrite=overwrite, resume=resume):  # held for the ranks (HELD_ENV)
        return _spawn(config, out, progress=progress, overwrite=overwrite, resume=resume)


def _spawn(config: RunConfig, out: Path, *, progress: bool, overwrite: bool, resume: bool) -> dict[str, Any]:
    from .resume import RESUMABLE_KEYS

    world, port = config.processes, free_port()
    tmp = Path(tempfile.mkdtemp(prefix="sheaf-fmtl-ranks-"))
    # -P: the working directory is not on the ranks' import path (a module there shadows nothing)
    if resume:
        keys = config.to_dict()
        pairs = [f"{k}={json.dumps(keys[k])}" for k in RESUMABLE_KEYS]  # JSON values read as YAML
        argv = [sys.executable, "-P", "-m", "sheaf_fmtl", "run", "--resume", str(out), "--trust-plugins"]
        argv += ["--set", *pairs]  # (--trust-plugins: this process has checked the plug-ins)
    else:
        cfg_file = tmp / "config.yaml"
        cfg_file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        argv = [sys.executable, "-P", "-m", "sheaf_fmtl", "run", str(cfg_file), "--out", str(out)]
        argv += ["--overwrite"] if overwrite else []
    procs, logs = [], []
    lock = held_lock(out)  # ranks inherit it; its descriptor, not the folder's name, lets them in
    held = {HELD_ENV: str(out.resolve()), **({} if lock is None else {HELD_FD_ENV: str(lock)})}
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
        env.update(LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.update({STORE_FILE: str(tmp / "rendezvous"), "GLOO_SOCKET_IFNAME": _loopback()})
        env.update({**held, LAUNCHER: str(os.getpid())})
        log = open(tmp / f"rank{rank}.err", "w+")  # noqa: SIM115 - read after the rank ends
        procs.append(  # own session: a signal reaches a rank once, forwarded by _wait
            subprocess.Popen(
                [*argv, "--quiet"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                pass_fds=() if lock is None else (lock,),  # the folder's lock, held while the rank lives
            )
        )
        logs.append(log)
    if progress:
        print(f"sheaf-fmtl: {world} processes running ({config.rounds} rounds) ...", file=sys.stderr)
    codes = _wait(procs, config.timeout_s)
    errors = []
    for rank, (code, log) in enumerate(zip(codes, logs, strict=True)):
        log.seek(0)
        lines = [s.strip() for s in log.read().splitlines() if s.strip() and not s.startswith(("\r", "  "))]
        log.close()
        if rank == 0:  # the run's warnings, as one process would have shown them
            for line in lines:
                if line.startswith("sheaf-fmtl: warning:"):
                    print(line, file=sys.stderr)
        if code != 0 and code not in STOPPED:
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            last = next((s for s in reversed(lines) if "error" in s), lines[-1] if lines else "")
            last = last if code > 0 else last[:300]  # (a signal: what it said last, e.g. why it aborted)
            errors.append(f"rank {rank} ended with {how}" + (f" ({last})" if last else ""))
    shutil.rmtree(tmp, ignore_errors=True)
    if errors and all(c == 2 for c in codes):  # every rank refused the run: its one line, once
        raise ValueError(_refusal(errors[0]))
    if errors:
        raise RankLostError(f"{world} processes: " + "; ".join(errors))
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _refusal(error: str) -> str:
    """The message of a rank's ``sheaf-fmtl: error: ...`` line kept in ``error``."""
    inner = error.partition(" (")[2].removesuffix(")")
    return inner.removeprefix("sheaf-fmtl: error: ") or error


def _wait(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int]:
    """Exit codes of every rank; once one fails, the others get ``timeout_s`` + 10 s, then SIGKILL.
    SIGINT / SIGTERM to this process are forwarded to every rank (each in its own session, so
    Ctrl-C reaches it once), which stop after the same round; this process waits for them."""

    def forward(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _poll(procs, timeout_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _poll(procs: list[subprocess.Popen[bytes]], timeout_s: float) -> list[int]:
    deadline = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [int(c) for c in codes]  # type: ignore[arg-type]
        if deadline is None and any(c not in (None, 0) for c in codes):
            deadline = time.monotonic() + timeout_s + 10
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)


def run_any(
    config: RunConfig, out: Path, *, progress: bool, overwrite: bool, build: Callable[..., Any] | None = None
) -> dict[str, Any] | None:
    """The ``run`` command's dispatch: a rank (torchrun or :func:`spawn`'s child), else
    :func:`dispatch`; the summary to print (``None`` on ranks other than 0)."""
    if rank_world() is not None:
        return run_rank(config, out, progress=progress, overwrite=overwrite, build=build)
    ran = dispatch(config, out, progress=progress, overwrite=overwrite, build=build)
    return ran if isinstance(ran, dict) else ran.summary


def dispatch(
    config: RunConfig,
    out: Path | None,
    *,
    progress: bool,
    overwrite: bool,
    build: Callable[..., Any] | None = None,
    callbacks: Sequence[Any] = (),
) -> RunOutcome | dict[str, Any]:
    """One run of ``config``, for ``sheaf-fmtl run`` and :func:`sheaf_fmtl.run` alike: ``processes =
    K > 1`` starts ``K`` ranks on this machine (:func:`spawn`), which write the run folder ``out``,
    and returns rank 0's summary; else runs in this process (into ``out``, or in memory when
    ``None``) and returns its :class:`.loop.RunOutcome`. ``K`` ranks are refused in one line
    (:class:`ConfigError`) without a run folder, where they hand their results over, and with
    ``callbacks``, which would run in this process, not in the ranks."""
    from .loop import execute

    if config.processes > 1:
        if out is None:
            raise ConfigError(
                f"config key 'processes' = {config.processes}: the ranks hand their results over in the run "
                "folder; give out=FOLDER (or run with processes=1)"
            )
        if callbacks:
            raise ConfigError(
                f"config key 'processes' = {config.processes}: callbacks run in this process, not in the "
                "ranks; run with processes=1 to use them"
            )
        return spawn(config, out, progress=progress, overwrite=overwrite)
    owned = claim(out, overwrite=overwrite) if out is not None else contextlib.nullcontext()
    with owned, interrupt.leave_summary(out):
        return execute(config, out, progress=progress, overwrite=overwrite, build=build, callbacks=callbacks)


def resume_any(
    run_dir: Path,
    overrides: list[str] | None = None,
    keys: dict[str, Any] | None = None,
    *,
    progress: bool,
    build: Callable[..., Any] | None = None,
    trust: bool = False,
) -> dict[str, Any] | None:
    """``run --resume RUN_DIR``'s dispatch, as :func:`run_any`: a rank continues from its own shard
    (the checkpoint chosen before the group meets, so rank 0's clean-up cannot race the others'
    reads), ``processes = K`` starts ``K`` ranks that do so (after the same checks here, so a bad
    resume is refused before any rank starts), one process resumes in place
    (:func:`.resume.resume`). The summary to print (``None`` on ranks other than 0).
    ``trust``: import the plug-ins the folder's config names (:func:`.resume.resume_config`)."""
    from .resume import checkpoint_to_resume, resume, resume_config

    ranks = rank_world()
    member = ranks is not None and ranks[0] != 0  # rank 0 holds the folder's lock for the group
    config = resume_config(run_dir, overrides, keys, group_member=member, trust=trust)
    if ranks is not None:
        lead = ranks[0] == 0
        with claim(run_dir, resume=True) if lead else contextlib.nullcontext():
            folder = checkpoint_to_resume(run_dir, config, ranks[1], cleanup=lead)
            return run_rank(
                config,
                run_dir,
                progress=progress,
                overwrite=False,
                build=build,
                resume_from=folder,
                resuming=True,
            )
    if config.processes > 1:
        with claim(run_dir, resume=True):
            checkpoint_to_resume(run_dir, config, config.processes)
            return spawn(config, run_dir, progress=progress, overwrite=False, resume=True)
    return resume(run_dir, overrides, keys, progress=progress, build=build, trust=trust).summary
