"""Sheaf-FMTL on your own torch Datasets and CNN: one ``torch.utils.data.Dataset`` per client.

Each client holds small 1x12x12 images of bars (horizontal, vertical, the two diagonals) drawn with
noise; clients differ in how bright and noisy their images are and in which two bar types they
swap the labels of (a personal twist of the task). Every client trains the same small hand-written
CNN (no torchvision, nothing to download), so Sheaf-FMTL, local training and dFedU all run it.

The datasets are read once into memory (the federation stacks every client's data); a dataset too
large for memory is refused before it is read: give such a client a ``torch.utils.data.Subset``.

    python examples/cnn_datasets.py            # about a minute of CPU time
    python examples/cnn_datasets.py --quick    # a few seconds (what the test suite runs)
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import Dataset

import sheaf_fmtl

SIDE, CLASSES = 12, 4


class Bars(Dataset[tuple[torch.Tensor, int]]):
    """``n`` noisy bar images of client ``client`` (items ``(image [1, 12, 12], label)``)."""

    def __init__(self, client: int, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(1000 * seed + client)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        grid = torch.arange(SIDE)
        rows, cols = grid[:, None].expand(SIDE, SIDE), grid[None, :].expand(SIDE, SIDE)
        shapes = [rows == SIDE // 2, cols == SIDE // 2, rows == cols, rows + cols == SIDE - 1]
        images = torch.stack([shapes[int(k)] for k in self.labels]).float() * (0.5 + 0.1 * client)
        self.images = (images + (0.3 + 0.05 * client) * torch.randn(images.shape, generator=g)).unsqueeze(1)
        swap = client % 2  # odd clients swap the labels of the diagonals, even ones those of the axes
        a, b = (2, 3) if swap else (0, 1)
        self.labels = torch.where(self.labels == a, b, torch.where(self.labels == b, a, self.labels))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, int]:
        return self.images[k], int(self.labels[k])


def small_cnn() -> nn.Module:
    """conv3x3(8)-relu-pool2-conv3x3(16)-relu-fc(4): 1x12x12 -> 4 scores."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 3 * 3, CLASSES),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, sheaf_fmtl.RunResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings (seconds)")
    args = parser.parse_args(argv)
    clients, samples, rounds = (4, 24, 2) if args.quick else (6, 300, 60)
    data = [(Bars(i, samples, seed=0), Bars(i, samples // 3, seed=1)) for i in range(clients)]
    ring = [(i, (i + 1) % clients) for i in range(clients)]  # an edge list
    fed = sheaf_fmtl.Federation(data, small_cnn, graph=ring)
    keys = {"rounds": rounds, "eval_every": max(1, rounds // 4), "alpha": 0.05, "batch_size": 32}
    coupling = {"lam": 0.05}  # read by the algorithms that communicate (local training has none)
    results = {
        "sheaf-fmtl": fed.run(algorithm="sheaf-fmtl", **keys, **coupling),
        "local": fed.run(algorithm="local", **keys),
        "dfedu": fed.run(algorithm="dfedu", **keys, **coupling),
    }
    print(f"{'algorithm':<14}{'test accuracy':>14}{'Mbit sent':>12}{'GFLOP':>10}")
    for name, r in results.items():
        bits, flops = r.summary["transmitted_bits"] / 1e6, r.summary["flops"] / 1e9
        print(f"{name:<14}{r.final:>14.4f}{bits:>12.2f}{flops:>10.3f}")
    return results


if __name__ == "__main__":
    main()
