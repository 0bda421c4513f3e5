"""Probe batches of ``maps = functional``: the inputs ``X_(e,t)`` both ends of an edge feed their
models, drawn from ``(seed, edge, round)`` alone by the counter hash of :mod:`.selection` (stream
3), so the two ends, and any split of the clients over processes, draw the same batch.

- Noise: ``B`` inputs of i.i.d. ``N(0, 1)`` entries (Box-Muller in float64 from the hash), shaped
  like one sample, or over a shared feature space whose columns each client takes (tabular clients
  that see different features: :func:`noise_probes` with ``width`` the number of feature ids).
- A pool of unlabelled inputs ``[P, ...]``: ``B`` rows drawn uniformly with replacement
  (:func:`pool_rows`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .selection import edge_keys, hash_uniform32

PROBE_STREAM = 3


def noise_probes(
    seed: int, edges: np.ndarray, round_: int, size: int, shape: tuple[int, ...], device: torch.device | str
) -> torch.Tensor:
    """``[E, size, *shape]`` standard normal probes of the listed edges (global ids) at ``round_``."""
    e = torch.as_tensor(edges, dtype=torch.long, device=device)
    keys = edge_keys(seed, e, round_, stream=PROBE_STREAM)[:, None]
    n = size * math.prod(shape)
    counters = torch.arange(2 * n, device=device)[None, :]
    u = (hash_uniform32(keys, counters).double() + 0.5) / 2.0**32  # in (0, 1)
    g = torch.sqrt(-2.0 * torch.log(u[:, :n])) * torch.cos(2.0 * torch.pi * u[:, n:])
    return g.float().view(len(e), size, *shape)


def pool_rows(
    seed: int, edges: np.ndarray, round_: int, size: int, pool: int, device: torch.device | str
) -> torch.Tensor:
    """``[E, size]`` rows of a pool of ``pool`` inputs for the listed edges at ``round_``."""
    e = torch.as_tensor(edges, dtype=torch.long, device=device)
    keys = edge_keys(seed, e, round_, stream=PROBE_STREAM)[:, None]
    u = hash_uniform32(keys, torch.arange(size, device=device)[None, :])
    return (u * pool) >> 32
