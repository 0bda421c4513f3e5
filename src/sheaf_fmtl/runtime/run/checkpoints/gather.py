"""The final state of a run (``checkpoint.pt``'s payload, :func:`final_state`); across processes
gathered on rank 0 (:func:`gather_final_state`).

Rank 0 receives every rank's thetas (by client id) and, for Sheaf-FMTL with ``save_maps``, every
map ``P_ij`` (by half-edge); ``map_norms`` (``[2E]``, zero off each rank's half-edges) is summed.
The payload has the one-process keys, except that the maps are ``maps_by_half_edge`` (one ``[d_ij,
d_i]`` tensor per graph half-edge ``h = src[h] -> dst[h]``, in half-edge order) instead of per bucket;
``shared_parameters`` and the learned ``edge_weights`` (and their history) are summed like the norms.
Models with BatchNorm add ``batchnorm``: each client's running statistics (by buffer name; ``None``
for a client without BatchNorm), gathered like the thetas.
The other ranks return their own part (they write nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from ...engine.simulate import Simulation


def final_state(sim: Simulation[Any]) -> dict[str, Any]:
    """``checkpoint.pt``'s payload: each client's theta (on the CPU), the edges, and the
    algorithm's own state (Sheaf-FMTL: the maps, or only their norms when ``save_maps=false``).
    Across processes, gathered on rank 0 (:func:`gather_final_state`; a collective)."""
    fed = sim.ctx.fed
    if not fed.held.all():
        return gather_final_state(sim)
    return {
        "thetas": [sim.state.thetas[fed.cohort_of[i]][fed.position[i]].cpu() for i in range(fed.num_clients)],
        "edges": torch.as_tensor(sim.ctx.graph.edges),
        **sim.algorithm.checkpoint(sim.state, sim.ctx),
        **_batchnorm(fed.norm_state(), fed.num_clients),
    }


def _batchnorm(stats: dict[int, dict[str, torch.Tensor]], n: int) -> dict[str, Any]:
    """``{"batchnorm": [client i's BatchNorm buffers by name, or None]}``; ``{}`` without BatchNorm."""
    return {"batchnorm": [stats.get(i) for i in range(n)]} if stats else {}


def held_thetas(sim: Simulation[Any]) -> dict[int, torch.Tensor]:
    """The thetas of the clients this process holds (CPU copies), by client id."""
    return {int(i): sim.theta(int(i)).detach().to("cpu", copy=True) for i in sim.ctx.fed.held.nonzero()[0]}


def gather_models(sim: Simulation[Any]) -> tuple[dict[int, torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
    """Every client's theta and BatchNorm statistics (by client id) on rank 0, this process's own
    on the others (a collective across processes: every rank calls it)."""
    mine = held_thetas(sim), sim.ctx.fed.norm_state()
    if sim.ctx.fed.held.all():
        return mine
    parts, lead = _gather_parts(mine[0], {}, mine[1])
    if not lead:  # (ranks other than 0: their own)
        return mine
    thetas: dict[int, torch.Tensor] = {}
    norms: dict[int, dict[str, torch.Tensor]] = {}
    for t, _, b in parts:
        thetas.update(t)
        norms.update(b)
    return thetas, norms


def _gather_parts(
    thetas: dict[int, torch.Tensor], maps: dict[int, torch.Tensor], norms: dict[int, dict[str, torch.Tensor]]
) -> tuple[list[Any], bool]:
    """Every rank's ``(thetas, maps, norms)`` on rank 0 (empty elsewhere), and whether this is rank
    0: one ``gather_object``, or under ``transport = tls`` named tensors along the silo tree (no pickle)."""
    from ...silonet.session import current

    silo = current()
    if silo is None:
        parts: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
        dist.gather_object((thetas, maps, norms), parts if dist.get_rank() == 0 else None, dst=0)
        return parts, dist.get_rank() == 0
    named = {f"t/{i}": t for i, t in thetas.items()} | {f"m/{h}": m for h, m in maps.items()}
    named |= {f"b/{i}/{k}": v for i, stats in norms.items() for k, v in stats.items()}
    got = silo.gather(named)
    if got is None:
        return [], False
    t: dict[int, torch.Tensor] = {}
    m: dict[int, torch.Tensor] = {}
    b: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in got.items():
        kind, _, rest = name.partition("/")
        if kind == "t":
            t[int(rest)] = value
        elif kind == "m":
            m[int(rest)] = value
        else:
            client, _, key = rest.partition("/")
            b.setdefault(int(client), {})[key] = value
    return [(t, m, b)], True


def gather_final_state(sim: Simulation[Any]) -> dict[str, Any]:
    """See the module docstring; a collective: every rank calls it."""
    fed, graph, comm = sim.ctx.fed, sim.ctx.graph, sim.ctx.comm
    mine = held_thetas(sim)
    local = sim.algorithm.checkpoint(sim.state, sim.ctx)
    maps = sim.maps() if "maps" in local else {}
    index = {(int(s), int(d)): h for h, (s, d) in enumerate(zip(graph.src, graph.dst, strict=True))}
    my_maps = {index[k]: m.detach().cpu() for k, m in maps.items()}
    my_norms = fed.norm_state()
    parts, lead = _gather_parts(mine, my_maps, my_norms)
    out: dict[str, Any] = {k: v for k, v in local.items() if k not in ("maps", "bucket_half_edges")}
    for key in ("map_norms", "shared_parameters", "edge_weights", "edge_weight_history"):
        if key in local:  # [2E] (or [K, E]), zero off this rank's half-edges
            out[key] = comm.all_sum(local[key])
    if not lead:
        return {"thetas": list(mine.values()), "edges": torch.as_tensor(graph.edges), **out}
    thetas: dict[int, torch.Tensor] = {}
    by_half_edge: dict[int, torch.Tensor] = {}
    norms: dict[int, dict[str, torch.Tensor]] = {}
    for t, m, b in parts:
        thetas.update(t)
        by_half_edge.update(m)
        norms.update(b)
    result = {
        "thetas": [thetas[i] for i in range(fed.num_clients)],
        "edges": torch.as_tensor(graph.edges),
        **out,
        **_batchnorm(norms, fed.num_clients),
    }
    if "maps" in local:
        result["maps_by_half_edge"] = [by_half_edge[h] for h in range(graph.num_half_edges)]
    return result
