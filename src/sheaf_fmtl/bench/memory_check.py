"""Before a bench setting starts: will it fit? Its learned maps ``[floor(gamma d), d]`` on both ends of
each edge of its seeded graph, counted without building anything, against the memory this machine has
free (``MemAvailable``, or the GPU's free memory). A setting that does not fit is refused in one line
that names what it needs and what to run instead, rather than being killed by the out-of-memory killer.

The estimate (:func:`setting_bytes`) is what a round holds at its peak: the maps twice (the maps and
their update), the loop reference's copy of a subset of them (``ref_max_bytes`` at most) twice, the
data, and the interpreter with PyTorch loaded. On the ``paper-quick`` setting it is 1.3 times the
measured peak resident memory (``bench.json``'s ``peak_rss``): on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..federation.build import count_parameters
from ..models import build_model
from ..sheaf.graph import make_graph
from .settings import Setting

#: Resident memory of an interpreter that imported PyTorch and the library (measured: 0.26-0.28 GiB).
INTERPRETER_BYTES = 300 << 20
GIB = float(1 << 30)


class BenchMemoryError(RuntimeError):
    """A bench setting needs more memory than this machine has free."""


@dataclass(frozen=True)
class SettingBytes:
    """What a setting holds: its maps, the reference's copy, its data, and the peak estimate."""

    maps: int
    reference: int
    data: int

    @property
    def peak(self) -> int:
        return INTERPRETER_BYTES + 2 * self.maps + 2 * self.reference + self.data


def setting_bytes(s: Setting) -> SettingBytes:
    """The bytes of ``s``'s maps (its seeded Erdos-Renyi graph's edges, two maps each, ``map_dtype``
    elements), of the reference's copy and of its float32 data."""
    edges = make_graph("erdos-renyi", s.clients, p=s.graph_p, seed=s.seed).num_edges
    d = count_parameters(build_model(s.model, s.feature_shape, s.classes))
    itemsize = torch.empty((), dtype=getattr(torch, s.map_dtype)).element_size()
    maps = 2 * edges * max(1, math.floor(s.gamma * d)) * d * itemsize
    data = s.clients * s.samples * (math.prod(s.feature_shape) + 1) * 4
    return SettingBytes(maps=maps, reference=min(maps, s.ref_max_bytes), data=data)


def available_bytes(device: str) -> int | None:
    """Free memory where ``device`` computes: the GPU's free memory, or the kernel's ``MemAvailable``
    (``None`` where neither can be read)."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(s: Setting, device: str, free: int | None = None) -> None:
    """:class:`BenchMemoryError` when ``s`` needs more than the free memory (``free``: given, else
    read with :func:`available_bytes`); nothing where the free memory cannot be read."""
    free = available_bytes(device) if free is None else free
    need = setting_bytes(s)
    if free is None or need.peak <= free:
        return
    where = "GPU" if device.startswith("cuda") else "machine"
    raise BenchMemoryError(
        f"bench setting {s.name!r} needs about {need.peak / GIB:.1f} GiB ({need.maps / GIB:.1f} GiB of "
        f"maps at gamma {s.gamma:g}) and this {where} has {free / GIB:.1f} GiB free; run "
        "`sheaf-fmtl bench --quick` (the paper-scale setting shrunk to a few hundred MB of maps) or "
        "`--settings small`"
    )
