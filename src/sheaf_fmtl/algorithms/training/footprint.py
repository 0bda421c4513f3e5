"""The memory a coupling will hold, known from its layout before anything is allocated, and the
start-up refusal of a run that would not fit the free memory of its device (or host).

Learned and fixed maps: ``sum`` over held half-edges of ``d_ij x d_i`` elements of ``map_dtype``
(:meth:`~sheaf_fmtl.sheaf.layout.SheafLayout.map_bytes`). Coordinate maps with estimates: one
copy ``[d_i]`` of a neighbour's model per held half-edge, in the thetas' dtype. Free memory:
``torch.cuda.mem_get_info`` on a CUDA device, ``MemAvailable`` of ``/proc/meminfo`` otherwise (no
check where neither is known).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...config import ConfigError, RunConfig
from ...sheaf.layout import SheafLayout
from ...sheaf.maps import MAP_DTYPES

MEMINFO = Path("/proc/meminfo")


def free_bytes(device: str) -> int | None:
    """Bytes that ``device`` can still allocate: CUDA's free memory, or the host's available memory
    for the CPU (``MemAvailable``); ``None`` when unknown."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def estimate_bytes(layout: SheafLayout, element_size: int) -> int:
    """Bytes of two model copies ``[d_i]`` per held half-edge (the estimates of coordinate maps: the
    edge's public copies of both ends' models)."""
    return 2 * sum(b.size * b.node_dim for b in layout.buckets) * element_size


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def require_fits(need: int, what: str, device: str, change: str) -> None:
    """Refuse (one line, :class:`ConfigError`) a run whose ``what`` needs ``need`` bytes on
    ``device`` when fewer are free; ``change``: the keys that shrink it."""
    free = free_bytes(device)
    if free is not None and need > free:
        where = "the host" if device == "cpu" else device
        raise ConfigError(f"{what} need {gigabytes(need)} but {where} has {gigabytes(free)} free; {change}")


def require_maps_fit(layout: SheafLayout, cfg: RunConfig) -> None:
    """Refuse learned or fixed maps that would not fit, before drawing them."""
    halve = "" if cfg.map_dtype == "bfloat16" else ", store them as map_dtype=bfloat16 (half the bytes)"
    require_fits(
        layout.map_bytes(MAP_DTYPES[cfg.map_dtype].itemsize),
        f"the restriction maps (maps={cfg.maps}, {layout.num_clients} clients, gamma={cfg.gamma:g}, "
        f"map_dtype={cfg.map_dtype})",
        cfg.device,
        f"lower gamma{halve}, or use maps=redrawn, features or aligned (no stored maps)",
    )


def require_estimates_fit(layout: SheafLayout, element_size: int, device: str) -> None:
    """Refuse coordinate maps' estimates that would not fit, before copying the models."""
    require_fits(
        estimate_bytes(layout, element_size),
        "the estimates (maps=redrawn estimates=true: two model copies per edge end)",
        device,
        "use estimates=false, or a graph with fewer edges",
    )
