"""What one process's checkpoint shard holds: :func:`snapshot` takes host copies of the run's state
(the algorithm's state, every random stream, the transport's counters, the sample counts) and
:func:`restore` puts them back into a simulation freshly built from the same config. The format
and its writer: :mod:`.checkpoint`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ....algorithms.protocol.snapshot import host_copy, to_device

if TYPE_CHECKING:
    from ....metrics.flops import SampleCounter
    from ...engine.simulate import Simulation


def transport_counters(transport: object) -> dict[str, Any]:
    """The transport's counters (bits, and any other number or tensor it accumulates) and the
    ``state_dict()`` of its parts that have one (the fault injector's round and counts)."""
    out: dict[str, Any] = {}
    for name, value in vars(transport).items():
        if isinstance(value, int | float | torch.Tensor):
            out[name] = host_copy(value)
        elif callable(getattr(value, "state_dict", None)):
            out[name] = {"state_dict": host_copy(value.state_dict())}
    return out


def load_transport_counters(transport: object, saved: dict[str, Any], device: torch.device) -> None:
    """Put back what :func:`transport_counters` returned."""
    for name, value in saved.items():
        if isinstance(value, dict) and "state_dict" in value:
            getattr(transport, name).load_state_dict(to_device(value["state_dict"], device))
        else:
            setattr(transport, name, to_device(value, device))


def snapshot(
    sim: Simulation[Any], counter: SampleCounter, guard: Callable[[], None] | None = None
) -> dict[str, Any]:
    """One process's shard: host copies of the algorithm state (maps with their pending factors),
    every random stream, the transport's counters, the samples behind the local gradients and each
    client's BatchNorm statistics.

    Sheaf-FMTL's deferred maps are not copied (see ``SheafState.checkpoint``): ``guard`` (e.g.
    :meth:`CheckpointWriter.wait`) is called before the run next writes them in place, so a
    background write of this shard reads them unchanged, and the run stalls only if that write is
    still going at the next fold (every ``~sqrt(d_ij)`` rounds)."""
    store = getattr(sim.state, "store", None)
    if store is not None and hasattr(store, "before_write"):
        store.before_write = guard
    return {
        "state": sim.state.checkpoint(),
        "random": host_copy(sim.ctx.random_state()),
        "transport": transport_counters(sim.transport),
        "faults": sim.transport.faults.state_dict(),  # round of the drop plan, fault counts
        "samples": counter.samples(),
        "batchnorm": sim.ctx.fed.norm_state(),  # each client's own statistics (never exchanged)
    }


def restore(sim: Simulation[Any], counter: SampleCounter, shard: dict[str, Any]) -> None:
    """Put a :func:`snapshot` back into a simulation freshly built from the same config."""
    device = sim.state.thetas[0].device
    sim.state.restore(shard["state"], device)
    sim.ctx.load_random_state(shard["random"])
    load_transport_counters(sim.transport, shard["transport"], device)
    if "faults" in shard:
        sim.transport.faults.load_state_dict(shard["faults"])
    sim.ctx.fed.load_norm_state(shard.get("batchnorm", {}))
    for count, n in zip(counter.counts, shard["samples"], strict=True):
        count.fill_(int(n))
