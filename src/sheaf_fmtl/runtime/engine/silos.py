"""A rank's data across silos: the rank reads only the clients it holds, then the ranks exchange
their start-up numbers once (:mod:`sheaf_fmtl.data.census`: feature shapes, training-set sizes,
feature ids, the task and number of classes), never data.

Who holds which client follows from the graph and the placement alone (``clients`` gives N), so
a rank knows its clients before it reads anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from ...config import RunConfig
from ...data.base import DatasetError, FederatedDataset
from ...data.census import Census, census, merge, placeholder
from ...sheaf.graph import ClientGraph
from .shard import placement


def read_silo(
    config: RunConfig,
    graph: ClientGraph,
    rank_world: tuple[int, int],
    load: Callable[[list[int]], FederatedDataset],
) -> FederatedDataset:
    """The whole federation's dataset as rank ``rank`` of ``world`` sees it: its own clients' data
    (``load(held ids)``, :func:`.simulate.load_dataset` with ``held``), the others' shapes and sizes
    from the start-up exchange (a collective: every rank calls it)."""
    rank, world = rank_world
    owner = placement(graph, world, config.placement, config.seed)
    attach_silo(owner, graph)
    held = owner == rank
    failed = ""
    try:
        local: FederatedDataset | None = load([int(i) for i in held.nonzero()[0]])
    except DatasetError as e:  # told to the others too, so that none waits for this rank's numbers
        local, failed = None, str(e)
    parts = exchange({"error": failed} if local is None else census(local).as_dict(), world)
    errors = [(r, p["error"]) for r, p in enumerate(parts) if "error" in p]
    if errors:
        r, message = errors[0]
        raise DatasetError(message if r == rank else f"rank {r} could not read its clients' data: {message}")
    assert local is not None
    return placeholder(local, merge([Census(**_tuples(p)) for p in parts], graph.num_nodes))


def attach_silo(owner: Any, graph: ClientGraph) -> None:  # noqa: ANN401 - the placement array
    """Under ``transport = tls``: make this silo's links to its neighbours (nothing otherwise)."""
    from ..silonet.session import current

    silo = current()
    if silo is not None:
        silo.attach(owner, graph.src, graph.dst)


def exchange(numbers: dict[str, Any], world: int) -> list[dict[str, Any]]:
    """Every rank's ``numbers`` (plain numbers and strings), in rank order: one all-gather (as JSON
    along the silo links under ``transport = tls``)."""
    from ..silonet.session import current

    silo = current()
    if silo is not None:
        return [dict(p) for p in silo.all_gather_json(numbers)]  # type: ignore[call-overload]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, numbers)
    return out


def _tuples(p: dict[str, Any]) -> dict[str, Any]:
    """A census as sent (lists) back to its fields' tuples."""
    nested = ("shapes", "features")
    out = dict(p)
    for key in ("ids", "shapes", "n_train", "features"):
        if out[key] is not None:
            out[key] = tuple(tuple(v) if key in nested else v for v in out[key])
    return out
