"""``processes = K`` without torchrun: start ``K`` ranks (:mod:`.rank`) on this machine, with a
rendezvous through a temporary file (no TCP listener) and Gloo's connections on the loopback
interface only; they inherit the run folder's lock (:mod:`..folder.rundir`), run quietly, and are waited
for (a signal to this process is forwarded to each; once one fails the others get ``timeout_s``).
Rank 0's warnings are shown when they end; a rank that ended badly is named in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from ....config import RunConfig
from ....data.bounded import read_text_bounded
from ...silonet.session import PEERS_ENV as SILO_PEERS
from ..folder.folderlock import HELD_ENV, HELD_FD_ENV, held_lock
from ..folder.rundir import claim
from ..stopping import interrupt
from .precheck import check_processes
from .rank import RankLostError
from .rankenv import LAUNCHER, STORE_FILE

if TYPE_CHECKING:
    pass


STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # a rank's exit status after a clean stop


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


def _rank_command(config: RunConfig, out: Path, tmp: Path, *, overwrite: bool, resume: bool) -> list[str]:
    """The command line every rank runs: the run's config written to ``tmp``, or its resume.
    ``-P``: the working directory is not on the ranks' import path (a module there shadows nothing)."""
    from .resume import RESUMABLE_KEYS

    if resume:
        keys = config.to_dict()
        pairs = [f"{k}={json.dumps(keys[k])}" for k in RESUMABLE_KEYS]  # JSON values read as YAML
        argv = [sys.executable, "-P", "-m", "sheaf_fmtl", "run", "--resume", str(out), "--trust-plugins"]
        return [*argv, "--set", *pairs]  # (--trust-plugins: this process has checked the plug-ins)
    cfg_file = tmp / "config.yaml"
    cfg_file.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    argv = [sys.executable, "-P", "-m", "sheaf_fmtl", "run", str(cfg_file), "--out", str(out)]
    return argv + (["--overwrite"] if overwrite else [])


def _spawn(config: RunConfig, out: Path, *, progress: bool, overwrite: bool, resume: bool) -> dict[str, Any]:
    world = config.processes
    tmp = Path(tempfile.mkdtemp(prefix="sheaf-fmtl-ranks-"))
    argv = _rank_command(config, out, tmp, overwrite=overwrite, resume=resume)
    procs, logs = [], []
    lock = held_lock(out)  # ranks inherit it; its descriptor, not the folder's name, lets them in
    held = {HELD_ENV: str(out.resolve()), **({} if lock is None else {HELD_FD_ENV: str(lock)})}
    meet = _rendezvous(config, tmp)
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
        env.update(LOCAL_WORLD_SIZE=str(world), **meet)
        env.update({**held, LAUNCHER: str(os.getpid())})
        log = open(tmp / f"rank{rank}.err", "w+")  # noqa: SIM115 - read after the rank ends
        live = progress and rank == 0  # rank 0's progress and warnings shown as they come
        procs.append(  # own session: a signal reaches a rank once, forwarded by _wait
            subprocess.Popen(
                argv if live else [*argv, "--quiet"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE if live else log,
                start_new_session=True,
                pass_fds=() if lock is None else (lock,),  # the folder's lock, held while the rank lives
            )
        )
        logs.append(log)
    if progress:
        print(f"sheaf-fmtl: {world} processes running ({config.rounds} rounds) ...", file=sys.stderr)
        relay = threading.Thread(target=_relay, args=(procs[0].stderr, logs[0]), daemon=True)
        relay.start()
    codes = _wait(procs, config.timeout_s)
    if progress:
        relay.join(timeout=10.0)
    errors = []
    for rank, (code, log) in enumerate(zip(codes, logs, strict=True)):
        log.seek(0)
        lines = [s.strip() for s in log.read().splitlines() if s.strip() and not s.startswith(("\r", "  "))]
        log.close()
        if rank == 0 and not progress:  # the run's warnings, as one process would have shown them
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
    if errors and all(c == 1 for c in codes):  # every rank ended with the run's error
        _raise_divergence(out)
    if errors:
        raise RankLostError(f"{world} processes: " + "; ".join(errors))
    summary: dict[str, Any] = json.loads(read_text_bounded(out / "summary.json"))
    return summary


def _raise_divergence(out: Path) -> None:
    """A run that diverged on its ranks (rank 0's ``summary.json``: ``status = diverged``) raises what
    one process raises, :class:`~sheaf_fmtl.runtime.engine.simulate.DivergenceError`, with its message."""
    from ...engine.simulate import DivergenceError

    try:
        summary = json.loads(read_text_bounded(out / "summary.json"))
    except (OSError, ValueError):
        return
    if isinstance(summary, dict) and summary.get("status") == "diverged":
        raise DivergenceError(str(summary.get("message", "the run diverged")))


def _rendezvous(config: RunConfig, tmp: Path) -> dict[str, str]:
    """How the ranks find each other: a file and a loopback port for Gloo; for ``transport = tls``
    the silos' peers file (``tls_peers``, or one on the loopback written into ``tmp``), no rendezvous."""
    if config.transport != "tls":
        return {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            STORE_FILE: str(tmp / "rendezvous"),
            "GLOO_SOCKET_IFNAME": _loopback(),
        }
    peers = Path(config.tls_peers) if config.tls_peers else tmp / "peers.yaml"
    if not config.tls_peers:
        from ...silonet.session import write_loopback_peers

        write_loopback_peers(peers, [free_port() for _ in range(config.processes)])
    return {SILO_PEERS: str(peers)}


def _relay(stream: IO[bytes] | None, log: IO[str]) -> None:
    """Rank 0's standard error, line by line, into its log and onto this process's (its progress
    lines and warnings as one process shows them; its error, if any, is reported once it ends)."""
    for raw in stream or ():
        line = raw.decode(errors="replace")
        log.write(line)
        if not line.startswith("sheaf-fmtl: error:"):
            sys.stderr.write(line)
            sys.stderr.flush()
    log.flush()


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
        interrupt.adopt(signum)  # a command of several runs stops after this one (run --seeds, sweep)

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
