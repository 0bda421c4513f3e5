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
"""

from __future__ import annotations

import ctypes
import os
import warnings

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
#: Free bytes at the heap's top kept rather than returned (glibc's default: 128 KiB, moving with use).
KEEP_FREED = 2**31 - 1
#: Environment variable: ``kept`` (the default), ``lean`` or ``system`` (glibc's own policy).
POLICY_ENV = "SHEAF_FMTL_HEAP"
POLICIES = ("kept", "lean", "system")
#: ``lean``: allocations of at least this many bytes are mapped afresh (and returned when freed).
LEAN_MAPPED = 32 << 20


def heap_policy() -> str:
    """The policy :data:`POLICY_ENV` asks for (``kept`` when unset; an unknown value warns and keeps)."""
    asked = os.environ.get(POLICY_ENV, "").strip().lower() or "kept"
    if asked not in POLICIES:
        warnings.warn(
            f"{POLICY_ENV}={asked!r} is not one of {', '.join(POLICIES)}; the heap policy stays 'kept'",
            stacklevel=2,
        )
        return "kept"
    return asked


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
