"""Sizes known before anything is allocated: the bytes an ``.npy`` / ``.npz`` file's arrays take once
read and cast to float32 (from their headers, reading no data; every member of an ``.npz``, named
``*.npy`` or not), and the memory this process may still use (its own
limits first: ``RLIMIT_AS``, the cgroup's ``memory.max``; then the host's available memory).
A reader compares the two and refuses in one line (:func:`check_fits`) instead of ending in a
``MemoryError`` traceback, or in minutes of swapping."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from .base import DatasetError

_GIB = float(1 << 30)


#: The readers cast features to float32: a narrower stored type (``uint8`` images) widens to this.
_WIDEST_CAST = 4


def _header_bytes(f: IO[bytes]) -> int:
    """The bytes of the array whose ``.npy`` header starts at ``f`` once read and cast to float32 at
    least (ValueError: not one)."""
    version = np.lib.format.read_magic(f)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(f)
    return math.prod(int(s) for s in shape) * max(_WIDEST_CAST, np.dtype(dtype).itemsize)


def _member_bytes(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """The bytes one member of an ``.npz`` takes once numpy reads it: an array's from its header
    (whatever the member's name: numpy reads ``x_0`` as it reads ``x_0.npy``), any other member's
    whole size (numpy hands it over as bytes)."""
    with z.open(info) as f:
        if f.read(6) != b"\x93NUMPY":
            return int(info.file_size)
    with z.open(info) as f:
        return _header_bytes(f)


def stored_bytes(path: str | Path) -> int:
    """The bytes the arrays of the ``.npy`` or ``.npz`` file ``path`` take once read, from their
    headers (DatasetError naming the file when a header cannot be read)."""
    p = Path(path)
    try:
        if zipfile.is_zipfile(p):
            with zipfile.ZipFile(p) as z:
                return sum(_member_bytes(z, info) for info in z.infolist())
        with open(p, "rb") as f:
            return _header_bytes(f)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DatasetError(
            f"{p}: cannot read its array headers ({type(e).__name__}: {str(e)[:120]})"
        ) from None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def memory_left() -> tuple[int, str]:
    """``(bytes, what limits them)``: the least of what ``RLIMIT_AS`` leaves this process, what its
    cgroup's ``memory.max`` leaves it, and the host's available memory (``inf`` where unknown)."""
    found: list[tuple[float, str]] = []
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            used = _status_kib("VmSize") * 1024
            found.append((soft - used, f"RLIMIT_AS {soft / _GIB:.3g} GiB"))
    except (ImportError, OSError, ValueError):
        pass
    limit, now = _read_int("/sys/fs/cgroup/memory.max"), _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None:
        found.append((limit - (now or 0), f"cgroup memory.max {limit / _GIB:.3g} GiB"))
    available = _meminfo_kib("MemAvailable")
    if available is not None:
        found.append((available * 1024, "the host's available memory"))
    left, what = min(found, default=(math.inf, "no known limit"))
    return (int(left) if math.isfinite(left) else 1 << 62), what


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _meminfo_kib(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits(need: float, what: str, change: str) -> None:
    """DatasetError (one line: the estimate, the limit, what to change) when ``need`` bytes exceed
    what this process may still use (:func:`memory_left`)."""
    left, limit = memory_left()
    if need > left:
        raise DatasetError(
            f"{what} needs about {need / _GIB:.3g} GiB, more than the {max(left, 0) / _GIB:.3g} GiB this "
            f"process may use ({limit}); {change} (nothing was allocated)"
        )


def generated_bytes(name: str, clients: int | None, options: dict[str, object]) -> int | None:
    """An upper bound of the bytes a built-in generator (``synthetic*``) allocates for ``clients``
    clients and the ``data`` options (samples, features, per-client weights and their copies);
    ``None`` for a dataset that is not generated here."""
    from . import synthetic

    table = {
        "synthetic": (synthetic.SYNTHETIC_DEFAULTS, 30),
        "synthetic-hetero": (synthetic.HETERO_DEFAULTS, 20),
        "synthetic-clusters": (synthetic.CLUSTERS_DEFAULTS, synthetic.CLUSTERS_CLIENTS),
    }
    if name not in table:
        return None
    defaults, default_clients = table[name]
    o = {**defaults, **options}

    def number(key: str) -> float:
        value = o.get(key, 0)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0

    n = float(clients or default_clients)
    rows = number("max_samples") + number("test_samples")  # (synthetic: the protocol splits its rows)
    d, c, groups = number("features"), number("classes"), number("groups")
    # per value: float32 kept, its split and its standardised copies (a client's float64 draw and
    # its teacher ``d x c`` live one client at a time, counted per client to stay an upper bound)
    per_client = rows * (d + 1) * 4 * 3 + d * c * 8
    shared = groups * d * c * 8 * 3  # the groups' (clusters') weights, drawn once
    return int(n * per_client + shared)


def check_generated(name: str, clients: int | None, options: dict[str, object]) -> None:
    """Refuse (:func:`check_fits`) a generated dataset larger than this process may hold."""
    need = generated_bytes(name, clients, options)
    if need is not None:
        check_fits(
            need,
            f"dataset {name} with {clients or 'its default number of'} clients",
            "lower clients or the data options",
        )
