"""The graph kinds' own keys (``graph`` picks the kind, :mod:`.graph` builds it), declared as a
component (:mod:`sheaf_fmtl.component_keys`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..component_keys import ConfigError, Keys, declare_keys, key
from ..spelling import setting
from .graph import GRAPH_KINDS


@declare_keys("graph", selector="graph", readers=GRAPH_KINDS)
@dataclass(frozen=True)
class GraphKeys(Keys):
    """The graph kinds' own keys (``graph`` picks one)."""

    graph_p: float = key(
        0.2,
        "Edge probability (`erdos-renyi`); rewiring probability (`watts-strogatz`).",
        rule="0 < graph_p <= 1",
        readers=("erdos-renyi", "watts-strogatz"),
    )
    graph_degree: float | None = key(
        None,
        "Mean degree of an `erdos-renyi` graph: `graph_p = graph_degree / (clients - 1)`, so the degree "
        "stays as clients grow; drawn once, its small components joined to the largest by one edge each "
        "(summary.json's `graph_joined_edges`). `null`: `graph_p` as given.",
        rule="graph_degree > 0",
        readers=("erdos-renyi",),
    )
    graph_k: int = key(
        4,
        "Neighbours of each client on the `watts-strogatz` ring.",
        rule="graph_k >= 2",
        readers=("watts-strogatz",),
    )
    graph_m: int = key(
        2,
        "Edges each new client attaches with (`barabasi-albert`).",
        rule="graph_m >= 1",
        readers=("barabasi-albert",),
    )
    graph_file: str = key(
        "",
        "Edge list for `graph=file`: `i j` or `i j a_ij` (a positive weight, default 1) per line; given "
        "without `graph`, it implies `graph=file`.",
    )

    def check(self, config: Any) -> None:  # noqa: ANN401 - the run's config
        """``graph_file`` with ``graph = file`` only, and ``graph = file`` with one."""
        if config.graph == "file" and not config.graph_file:
            raise ConfigError(
                "config key 'graph_file' must name an edge-list file when graph = file: add "
                f"{setting('graph_file', 'edges.txt')} (one 'i j' or 'i j weight' per line)"
            )
        if config.graph_file and config.graph != "file":
            raise ConfigError(
                f"config key 'graph_file' = {config.graph_file} is read with graph = file, but config key "
                f"'graph' = {config.graph}, which ignores it; add {setting('graph', 'file')} (or leave graph "
                "out: graph_file alone implies graph=file)"
            )
