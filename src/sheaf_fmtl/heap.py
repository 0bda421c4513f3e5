"""How the C heap serves the large, short-lived tensors of a round (glibc only; nothing elsewhere).

glibc maps every allocation above its mmap threshold (at most 32 MiB) afresh and unmaps it when
freed, so each round's large temporaries (a cohort's mini-batch, the messages, the gradients) fault
in new zeroed pages: at 30,000 clients this is about 40 % of a round. :func:`keep_freed_pages`
serves them from the heap instead and keeps what is freed there for the next round (the program's
default: ``sheaf-fmtl`` calls it at start); ``SHEAF_FMTL_HEAP=system`` leaves glibc's policy.
``SHEAF_FMTL_HEAP=lean`` keeps the heap for everything below :data:`LEAN_MAPPED` (32 MiB) and maps
what is larger afresh, returned when freed: the few largest tensors of a round (messages, model
stacks) then leave no holes in the heap that smaller ones cannot fill, for less peak memory at many
clients and page faults on those tensors each round (``benchmarks/README.md`` measures both).
:func:`return_freed_memory` hands the free pages back once, after the data is read.

Both heap policies run without glibc's per-thread cache of freed small blocks (:data:`TUNABLES`):
a cached block stays in use for the heap, sits between the large blocks a round frees and keeps
them from merging, so the heap grows by holes round after round (10,000 clients: 0.52 GB against
0.47 with the cache off, the same time a round; ``benchmarks/README.md``). glibc reads it only at
start, so the command line starts itself again under it (:func:`run_under_tunables`).
"""

from __future__ import annotations

import ctypes
import os
import sys
import warnings
from collections.abc import Mapping

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
#: Free bytes at the heap's top kept rather than returned (glibc's default: 128 KiB, moving with use).
KEEP_FREED = 2**31 - 1
#: Environment variable: ``kept`` (the default), ``lean`` or ``system`` (glibc's own policy).
POLICY_ENV = "SHEAF_FMTL_HEAP"
POLICIES = ("kept", "lean", "system")
#: ``lean``: allocations of at least this many bytes are mapped afresh (and returned when freed).
LEAN_MAPPED = 32 << 20
#: glibc tunables of the ``kept`` and ``lean`` policies (``GLIBC_TUNABLES``, read when a process starts).
TUNABLES = ("glibc.malloc.tcache_count=0",)


def heap_policy() -> str:
    """The policy :data:`POLICY_ENV` asks for (``kept`` when unset; an unknown value warns and keeps)."""
    asked = _asked(os.environ)
    if asked not in POLICIES:
        warnings.warn(
            f"{POLICY_ENV}={asked!r} is not one of {', '.join(POLICIES)}; the heap policy stays 'kept'",
            stacklevel=2,
        )
        return "kept"
    return asked


def _asked(environ: Mapping[str, str]) -> str:
    """The value :data:`POLICY_ENV` holds in ``environ`` (``kept`` when unset), unchecked."""
    return environ.get(POLICY_ENV, "").strip().lower() or "kept"


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        for name in ("mallopt", "malloc_trim"):  # glibc's: absent elsewhere
            getattr(libc, name)
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed_pages(policy: str | None = None) -> bool:
    """Serve every allocation from the heap (``M_MMAP_MAX = 0``; ``lean``: those below
    :data:`LEAN_MAPPED`, ``M_MMAP_THRESHOLD``) and keep its freed pages (``M_TRIM_THRESHOLD``), for
    this process; ``False`` where not applied (not glibc, or ``SHEAF_FMTL_HEAP=system``). The cost:
    memory freed in a round is not returned until :func:`return_freed_memory`. ``policy``: one of
    :data:`POLICIES` (``None``: :func:`heap_policy`'s)."""
    if policy is None:
        policy = heap_policy()
    libc = _libc() if policy != "system" else None
    if libc is None:
        return False
    kept = bool(libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREED))
    if policy == "lean":
        return kept and bool(libc.mallopt(M_MMAP_THRESHOLD, LEAN_MAPPED))
    return kept and bool(libc.mallopt(M_MMAP_MAX, 0))


def applied_policy() -> str:
    """Apply :func:`heap_policy`'s policy (:func:`keep_freed_pages`) and name what this process runs
    under: that policy, or ``system`` where it could not be applied. An unknown value warns once."""
    policy = heap_policy()
    return policy if keep_freed_pages(policy) else "system"


def return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere):
    the many small per-client arrays a dataset is read into stay resident after they are freed."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def tunables_env(environ: Mapping[str, str]) -> dict[str, str] | None:
    """``environ`` with :data:`TUNABLES` added to ``GLIBC_TUNABLES`` (after any already there), or
    ``None`` where nothing is to change: not glibc, ``SHEAF_FMTL_HEAP=system`` (or a value that is
    no policy, which :func:`heap_policy` warns about), or every tunable already named there."""
    if _asked(environ) not in ("kept", "lean") or not _is_glibc():
        return None
    present = environ.get("GLIBC_TUNABLES", "")
    names = {t.split("=", 1)[0] for t in present.split(":") if t}
    missing = [t for t in TUNABLES if t.split("=", 1)[0] not in names]
    if not missing:
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join([present, *missing] if present else missing)}


def _is_glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None  # e.g. "glibc 2.36"; absent elsewhere
    except (AttributeError, ValueError, OSError):
        return False


def run_under_tunables() -> None:
    """Start this interpreter again, the same command line and process id, under
    :func:`tunables_env`'s environment (``execve``); nothing where it has nothing to change or the
    start fails. Call it first, before any thread or output: what ran before is started again."""
    env = tunables_env(os.environ)
    argv = getattr(sys, "orig_argv", None)
    if env is None or not argv or not sys.executable:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, env)
    except OSError:
        return
