"""Start-up of a paper-scale run is mostly drawing the restriction maps: ``init_maps``
(in place, several maps at once on torch's threads) against the one-map-at-a-time draw it replaced,
measured in the same run, same streams, same numbers (checked).

    .venv/bin/python benchmarks/map_init_bench.py [--gamma 0.003] [--repeats 2]

R-MNIST's layout: 40 clients, the ``cnn`` model (34,826 parameters), Erdos-Renyi p = 0.15, shared
Gaussian maps (the defaults). ``--gamma 0.01`` is the paper's 11.6 GiB of maps (needs the memory).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from sheaf_fmtl.sheaf.graph import make_graph
from sheaf_fmtl.sheaf.layout import build_layout
from sheaf_fmtl.sheaf.maps import _one_map, default_scale, init_maps
from sheaf_fmtl.streams import MAP, stream

CNN_PARAMETERS, CLIENTS = 34826, 40


def one_at_a_time(layout, seed: int) -> list[torch.Tensor]:  # noqa: ANN001 - the SheafLayout
    """The previous draw: one temporary per map, scaled, then copied into its bucket."""
    g, dims = layout.graph, layout.node_dims
    maps = [torch.empty(b.shape) for b in layout.buckets]
    for bi, b in enumerate(layout.buckets):
        scale = default_scale("gaussian", b.node_dim)
        for k, h in enumerate(b.half_edges.tolist()):
            key = min(h, int(g.rev[h])) if dims[g.src[h]] == dims[g.dst[h]] else h
            maps[bi][k] = _one_map("gaussian", scale, b.edge_dim, b.node_dim, stream(seed, MAP, key))
    return maps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=float, default=0.003)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    graph = make_graph("erdos-renyi", CLIENTS, p=0.15, seed=0)
    layout = build_layout(graph, [CNN_PARAMETERS] * CLIENTS, [0] * CLIENTS, args.gamma)
    times: dict[str, list[float]] = {"one_at_a_time": [], "init_maps": []}
    for _ in range(args.repeats):
        for name in times:
            t = time.perf_counter()
            if name == "init_maps":
                maps = init_maps(layout, "gaussian", seed=3, shared=True)
            else:
                maps = one_at_a_time(layout, 3)
            times[name].append(time.perf_counter() - t)
            gib = sum(m.numel() for m in maps) * 4 / 2**30
            del maps
    check = [
        torch.equal(a, b)
        for a, b in zip(
            init_maps(layout, "gaussian", seed=3, shared=True), one_at_a_time(layout, 3), strict=True
        )
    ]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                "gamma": args.gamma,
                "map_gib": round(gib, 3),
                "threads": torch.get_num_threads(),
                "seconds": times,
                "speedup_median": round(med["one_at_a_time"] / med["init_maps"], 2),
                "same_numbers": all(check),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
