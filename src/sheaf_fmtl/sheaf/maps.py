"""Restriction maps ``P_ij`` stacked per shape bucket, and the paper's initialisations.

Ablation (Section "Effect of the Restriction Maps Initialization"): Gaussian ``N(0, sigma^2)``,
uniform ``U(-a, a)``, orthogonal rows (``P P^T = I``), identity rows plus ``N(0, 0.01^2)`` noise.
``identity`` (no noise) gives the fixed maps of the special cases (dFedU with ``a_ij = 1``).
Zero maps are rejected: the map gradient ``r theta^T`` then keeps them zero (the paper's Remark).

Scale. ``map_scale = None`` (the default) scales random maps with the source stalk: Gaussian
``sigma = 1/sqrt(d_i)``, uniform ``a = sqrt(3/d_i)`` (the same variance), so that
``E ||P_ij theta||^2 = (d_ij / d_i) ||theta||^2`` and ``P_ij^T P_ij`` has eigenvalues up to about
``(1 + sqrt(d_ij/d_i))^2`` whatever the model size. The paper's ``N(0, 1)`` is ``map_scale = 1``: its
eigenvalues grow like ``(sqrt(d_i) + sqrt(d_ij))^2`` and need step sizes ``alpha lam`` that small.
Orthogonal rows (scale 1) and identity-plus-noise (noise ``sigma = 0.01``) keep their own defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import torch

from ..streams import MAP, stream
from .layout import SheafLayout

MAP_INITS = ("gaussian", "uniform", "orthogonal", "identity-noise", "identity")
DEFAULT_SCALE = {"identity-noise": 0.01, "orthogonal": 1.0, "identity": 1.0}  # gaussian, uniform: per d_i
MAP_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


class MapInitError(ValueError):
    """An initialisation that is unknown or gives zero maps (which never learn, paper Remark)."""


def _one_map(init: str, scale: float, d_e: int, d: int, gen: torch.Generator) -> torch.Tensor:
    if init == "gaussian":
        return torch.randn(d_e, d, generator=gen) * scale
    if init == "uniform":
        return (torch.rand(d_e, d, generator=gen) * 2 - 1) * scale
    if init == "orthogonal":
        q: torch.Tensor = torch.linalg.qr(torch.randn(d, d_e, generator=gen))[0]
        return q.T.contiguous() * scale
    eye = torch.eye(d_e, d)
    if init == "identity":
        return eye * scale
    if init == "identity-noise":
        return eye + torch.randn(d_e, d, generator=gen) * scale
    raise MapInitError(f"unknown map_init {init!r}; allowed: {', '.join(MAP_INITS)}")


def default_scale(init: str, node_dim: int) -> float:
    """The scale used when ``map_scale`` is not given (see the module docstring).

    Args:
        init: one of :data:`MAP_INITS`.
        node_dim: ``d_i``, the size of the source stalk.
    Returns:
        Gaussian ``sigma = 1/sqrt(d_i)``, uniform ``a = sqrt(3/d_i)``, else :data:`DEFAULT_SCALE`.
    """
    if init == "gaussian":
        return 1.0 / math.sqrt(node_dim)
    if init == "uniform":
        return math.sqrt(3.0 / node_dim)
    return DEFAULT_SCALE[init]


def init_maps(
    layout: SheafLayout,
    init: str,
    scale: float | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    shared: bool = False,
    on_device: bool = False,
) -> list[torch.Tensor]:
    """One ``[H_b, d_e, d]`` tensor per bucket of ``layout``; half-edge ``h``'s map drawn from its own
    stream ``(seed, MAP, h)`` (:mod:`sheaf_fmtl.streams`; ``seed`` given, else one number drawn from
    ``generator``), so it is the same whichever half-edges ``layout`` holds.

    ``shared``: both maps of an edge ``{i, j}`` with ``d_i = d_j`` start equal (``P_ji = P_ij``), so
    ``P_ij theta_i = P_ji theta_j`` asks the two models to agree on one ``d_ij``-dimensional
    projection; independent draws tie together coordinates that mean different things in the two
    models. Edges between models of different sizes keep independent draws.

    ``on_device``: Gaussian and uniform maps are drawn one bucket at a time by a generator on
    ``device`` (seeded from ``generator``): the same distribution, not the same numbers as the
    per-map CPU draws, and seconds instead of minutes for tens of GiB of maps on a GPU; these numbers
    depend on the buckets, so on how clients are split over processes.

    Args:
        layout: the buckets to fill (their shapes ``[H_b, d_e, d]``).
        init: one of :data:`MAP_INITS` (``zeros`` is refused).
        scale: ``sigma`` / ``a`` / noise scale; ``None``: :func:`default_scale`.
        dtype, device: storage of the maps.
        generator, seed: where the streams' base seed comes from (one of them is needed).
        shared, on_device: see above.
    Returns:
        One ``[H_b, d_e, d]`` tensor per bucket: the initial ``P_ij^0`` of Algorithm 1.
    References:
        Section "Effect of the Restriction Maps Initialization" (the ablation's initialisations).

    Examples:
        >>> from sheaf_fmtl.sheaf.graph import make_graph
        >>> from sheaf_fmtl.sheaf.layout import build_layout
        >>> from sheaf_fmtl.sheaf.maps import init_maps
        >>> layout = build_layout(make_graph("complete", 3), [3, 3, 3], [0, 0, 0], gamma=0.7)
        >>> maps = init_maps(layout, "gaussian", seed=0)
        >>> [tuple(p.shape) for p in maps], maps[0].dtype  # 6 half-edges, P_ij: [d_ij, d_i] = [2, 3]
        ([(6, 2, 3)], torch.float32)
        >>> init_maps(layout, "identity", seed=0)[0][0].tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    s = _checked_scale(init, scale, generator, seed)
    maps = [torch.empty(b.shape, dtype=dtype, device=device) for b in layout.buckets]
    if on_device and init in ("gaussian", "uniform"):
        gen = generator if generator is not None else torch.Generator().manual_seed(int(seed or 0))
        return _draw_on_device(layout, maps, init, s, gen, shared)
    # One stream per half-edge (per edge for shared maps), from the seed and its global id: a map
    # does not depend on how buckets are formed nor on which half-edges a process holds.
    base = int(torch.randint(0, 2**62, (1,), generator=generator)) if seed is None else seed
    _draw_per_map(layout, maps, init, s, base, shared)
    return maps


def _checked_scale(
    init: str, scale: float | None, generator: torch.Generator | None, seed: int | None
) -> float | None:
    """``scale`` as a float (``None`` stays ``None``), after refusing what :func:`init_maps` cannot
    draw: no seed and no generator, an unknown ``init``, or one that gives zero maps."""
    if generator is None and seed is None:
        raise ValueError("init_maps needs a seed or a generator")
    if init == "zeros":
        raise MapInitError("map_init=zeros is rejected: zero restriction maps never learn (paper Remark 2)")
    if init not in MAP_INITS:
        raise MapInitError(f"unknown map_init {init!r}; allowed: {', '.join(MAP_INITS)}")
    s = None if scale is None else float(scale)
    if s == 0.0 and init != "identity-noise":
        raise MapInitError(f"map_scale=0 with map_init={init} gives zero maps, which never learn")
    return s


def _draw_per_map(
    layout: SheafLayout, maps: list[torch.Tensor], init: str, scale: float | None, base: int, shared: bool
) -> None:
    """Fill ``maps`` map by map, half-edge ``h``'s from its stream ``(base, MAP, h)`` (the edge's
    lower half-edge id for shared maps, so ``P_ji = P_ij``)."""
    g, dims = layout.graph, layout.node_dims
    jobs: list[Callable[[], None]] = []
    for bi, b in enumerate(layout.buckets):
        scale_b = default_scale(init, b.node_dim) if scale is None else scale
        for k, h in enumerate(b.half_edges.tolist()):
            same = shared and dims[g.src[h]] == dims[g.dst[h]]
            key = min(h, int(g.rev[h])) if same else h  # shared: the edge's stream, P_ji = P_ij
            jobs.append(partial(_draw_into, maps[bi][k], init, scale_b, stream(base, MAP, key)))
    # Each map has its own stream, so drawing them on several threads gives the same numbers
    # (torch's kernels release the GIL); at R-MNIST scale this is most of a run's start-up.
    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        list(pool.map(lambda job: job(), jobs))


def _draw_into(out: torch.Tensor, init: str, scale: float, gen: torch.Generator) -> None:
    """Fill ``out`` (one ``[d_e, d]`` map) with :func:`_one_map`'s numbers: in place, without a
    temporary, where ``out`` is a float32 CPU tensor (Gaussian and uniform maps)."""
    if out.dtype == torch.float32 and out.device.type == "cpu" and init in ("gaussian", "uniform"):
        if init == "gaussian":  # torch.randn(...) * scale, operation for operation
            out.normal_(generator=gen).mul_(scale)
        else:  # (torch.rand(...) * 2 - 1) * scale
            out.uniform_(generator=gen).mul_(2).sub_(1).mul_(scale)
        return
    d_e, d = out.shape
    out.copy_(_one_map(init, scale, d_e, d, gen).to(out.dtype))


def _draw_on_device(
    layout: SheafLayout,
    maps: list[torch.Tensor],
    init: str,
    scale: float | None,
    generator: torch.Generator,
    shared: bool,
) -> list[torch.Tensor]:
    """Fill each bucket with one draw on its device (see :func:`init_maps`, ``on_device``)."""
    device = maps[0].device if maps else torch.device("cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    for b, m in zip(layout.buckets, maps, strict=True):
        s = default_scale(init, b.node_dim) if scale is None else scale
        if init == "gaussian":
            m.normal_(0.0, s, generator=gen)
        else:
            m.uniform_(-s, s, generator=gen)
    if shared:
        _share(layout, maps)
    return maps


def _share(layout: SheafLayout, maps: list[torch.Tensor]) -> None:
    """``P_ji := P_ij`` on every edge whose two maps have one shape."""
    where = _positions(layout)
    rev = layout.graph.rev
    for h in range(layout.graph.num_half_edges):
        if rev[h] < h:
            (bi, k), (ri, rk) = where[h], where[int(rev[h])]
            if maps[ri].shape[1:] == maps[bi].shape[1:]:
                maps[bi][k] = maps[ri][rk]


def _positions(layout: SheafLayout) -> dict[int, tuple[int, int]]:
    """Half-edge -> (bucket, row in the bucket's stack)."""
    buckets = enumerate(layout.buckets)
    return {int(h): (bi, k) for bi, b in buckets for k, h in enumerate(b.half_edges.tolist())}
