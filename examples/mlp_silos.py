"""Sheaf-FMTL on your own MLPs: two widths on a graph of data silos, with a loss of your own.

Eight silos (hospitals, say) each hold a small tabular classification task; silos in one region
share their decision rule up to a shift, regions differ. Even silos train a wide MLP, odd silos a
narrow one: two architectures on one graph, which Sheaf-FMTL couples through its restriction maps.
The loss is cross-entropy with label smoothing (a mean over samples, as every loss here must be).

Compared: Sheaf-FMTL with the paper's learned maps and with aligned maps (both widths: the maps
compare the hidden units the two widths share), local training (both widths), and, on the wide MLP
everywhere, dFedU (which averages whole models, so needs one architecture) and Sheaf-FMTL with maps
redrawn each round plus neighbour estimates (dFedU's coupling at a tenth of its bits).

    python examples/mlp_silos.py            # about a minute of CPU time
    python examples/mlp_silos.py --quick    # a few seconds (what the test suite runs)
"""

from __future__ import annotations

import argparse

import networkx as nx
import numpy as np
import torch
from torch import nn

import sheaf_fmtl

FEATURES, CLASSES = 6, 3


def silo_data(silos: int, samples: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Per silo ``(x_train, y_train, x_test, y_test)``: a region's rule, shifted per silo."""
    rng = np.random.default_rng(seed)
    regions = [rng.normal(size=(FEATURES, CLASSES)) for _ in range(2)]
    out = []
    for i in range(silos):
        w = regions[i % 2] + 0.3 * rng.normal(size=(FEATURES, CLASSES))
        x = rng.normal(size=(samples, FEATURES)).astype(np.float32)
        y = np.argmax(x @ w + 0.5 * rng.normal(size=(samples, CLASSES)), axis=1)
        cut = samples * 3 // 4
        out.append((x[:cut], y[:cut], x[cut:], y[cut:]))
    return out


def silo_graph(silos: int) -> nx.Graph:
    """Two regions, each a ring of silos, joined by one link."""
    g = nx.Graph()
    for region in (0, 1):
        ring = list(range(region, silos, 2))
        g.add_edges_from(zip(ring, ring[1:] + ring[:1], strict=True))
    g.add_edge(0, 1)
    return g


def mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, CLASSES))


def two_widths(i: int) -> nn.Module:
    """Silo ``i``'s model: even silos 32 hidden units, odd silos 8."""
    return mlp(32 if i % 2 == 0 else 8)


def smoothed_cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(outputs, targets, label_smoothing=0.1)


def main(argv: list[str] | None = None) -> dict[str, sheaf_fmtl.RunResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings (seconds)")
    args = parser.parse_args(argv)
    silos, samples, rounds = (4, 40, 3) if args.quick else (8, 200, 200)
    data, graph = silo_data(silos, samples), silo_graph(silos)
    keys = {"rounds": rounds, "eval_every": max(1, rounds // 4), "alpha": 0.05, "lam": 0.05, "batch_size": 16}
    uncoupled = {k: v for k, v in keys.items() if k != "lam"}  # local training reads no lam
    ours = sheaf_fmtl.Federation(data, two_widths, loss=smoothed_cross_entropy, graph=graph)
    results = {
        "sheaf-fmtl (8 + 32 units)": ours.run(algorithm="sheaf-fmtl", **keys),
        "sheaf-fmtl aligned (8 + 32)": ours.run(algorithm="sheaf-fmtl", maps="aligned", **keys),
        "local (8 + 32 units)": ours.run(algorithm="local", **uncoupled),
        "dfedu (32 units)": ours.run(algorithm="dfedu", model=lambda i: mlp(32), **keys),
        "sheaf-fmtl redrawn (32)": ours.run(
            algorithm="sheaf-fmtl", maps="redrawn", estimates=True, gamma=0.1, model=lambda i: mlp(32), **keys
        ),
    }
    print(f"{'algorithm':<28}{'test accuracy':>14}{'Mbit sent':>12}{'GFLOP':>10}")
    for name, r in results.items():
        bits, flops = r.summary["transmitted_bits"] / 1e6, r.summary["flops"] / 1e9
        print(f"{name:<28}{r.final:>14.4f}{bits:>12.2f}{flops:>10.3f}")
    return results


if __name__ == "__main__":
    main()
