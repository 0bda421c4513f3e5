"""A researcher's standard setting on R-MNIST: a CNN with BatchNorm, Dirichlet label skew, augmentation,
AdamW with a cosine schedule and gradient clipping, early stopping on validation, and MLflow.

- data: R-MNIST's training images pooled and split over the clients by a Dirichlet(0.3) over the
  labels (Flower Datasets' ``DirichletPartitioner``); each client keeps its rotation group;
- model: the built-in ``cnn-bn``, whose BatchNorm statistics each client keeps as its own (FedBN);
- training: ``random-crop-flip`` on each mini-batch, ``torch.optim.AdamW`` with
  ``CosineAnnealingLR`` over the run, gradients clipped to norm 1 per client;
- model selection: 20% of each client's training data held out; the run stops when the mean
  validation accuracy (``val_accuracy``) has not improved for ``--patience`` evaluations, and the
  best evaluation's models are scored on the test split (``best_test_accuracy``);
- logging: ``metrics.csv`` (``val_*`` columns) and an MLflow file store in the run folder
  (``mlflow ui --backend-store-uri RUN/mlruns``).

It reads MNIST from ``$SHEAF_FMTL_DATA`` or the user data folder (``sheaf-fmtl data fetch rmnist``).

    python examples/rmnist_toolbox.py --out runs/rmnist-toolbox   # 40 clients, up to 100 rounds
    python examples/rmnist_toolbox.py --quick                      # 8 clients on 1,600 images
    python examples/rmnist_toolbox.py --reduced 12 3000 80 [--algorithm local]  # to the end, to compare
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import sheaf_fmtl


def settings(quick: bool) -> dict[str, Any]:
    """The run's keys (``quick``: a small pool, few clients and rounds)."""
    keys: dict[str, Any] = {
        "dataset": "rmnist",
        "partition": "dirichlet",
        "partition_alpha": 0.3,
        "model": "cnn-bn",
        "transform": "random-crop-flip",
        "transform_args": {"padding": 2},
        "optimizer": "AdamW",
        "optimizer_args": {"weight_decay": 1e-4},
        "alpha": 1e-3,  # AdamW's learning rate; the coupling takes a step of its own (coupling_step)
        "lr_scheduler": "CosineAnnealingLR",  # T_max from rounds
        "grad_clip": 1.0,
        "local_epochs": 1,
        "batch_size": 32,
        "validation": 0.2,
        "early_stop_patience": 3,
        "log_mlflow": True,
        "rounds": 100,
        "eval_every": 5,
    }
    if quick:
        keys.update(clients=8, data={"pool": 1600}, rounds=3, eval_every=1, early_stop_patience=2)
    return keys


def reduced(keys: dict[str, Any], clients: int, pool: int, rounds: int) -> dict[str, Any]:
    """The same setting on ``clients`` clients sharing ``pool`` images for ``rounds`` rounds, run to
    the end (no early stop: two runs compare at the same round)."""
    return {**keys, "clients": clients, "data": {"pool": pool}, "rounds": rounds, "early_stop_patience": 0}


def main(argv: list[str] | None = None) -> sheaf_fmtl.RunResult:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 clients, 1,600 images, 3 rounds")
    parser.add_argument("--out", type=Path, default=Path("runs/rmnist-toolbox"), help="the run folder")
    parser.add_argument("--patience", type=int, help="evaluations without a better val_accuracy")
    parser.add_argument(
        "--reduced",
        nargs=3,
        type=int,
        metavar=("CLIENTS", "POOL", "ROUNDS"),
        help="a smaller run, to the end",
    )
    parser.add_argument(
        "--algorithm", default="sheaf-fmtl", help="e.g. local: the same setting without coupling"
    )
    args = parser.parse_args(argv)
    keys = settings(args.quick)
    if args.reduced:
        keys = reduced(keys, *args.reduced)
    keys["algorithm"] = args.algorithm
    if args.patience is not None:
        keys["early_stop_patience"] = args.patience
    result = sheaf_fmtl.run(out=args.out, overwrite=True, **keys)
    with open(args.out / "metrics.csv") as f:
        columns = next(csv.reader(f))
    s = result.summary
    coupled = (
        f"maps={s['maps']} lam={s['lam']:g} pull per round {s['pull_per_round']:g}" if "maps" in s else ""
    )
    print(f"ran: {s['algorithm']} {coupled} on {s['num_clients']} clients ({s['status']})")
    print(f"metrics.csv columns: {', '.join(c for c in columns if c.startswith('val_'))}, ...")
    best = f"; the best at round {s['best_round']}" if "best_round" in s else ""
    print(f"last validation accuracy {s['final']:.4f}{best}")
    if "best_test_accuracy" in s:
        print(f"best models' test accuracy: {s['best_test_accuracy']:.4f}")
    print(f"MLflow: mlflow ui --backend-store-uri {args.out / 'mlruns'}")
    return result


if __name__ == "__main__":
    main()
