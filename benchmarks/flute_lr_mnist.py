"""FLUTE's LR-MNIST protocol, as near as this library's data protocol allows: FedAvg of a logistic
model, 1,000 clients, 10 a round, 100 rounds, batch 10, step 0.03.

    SHEAF_FMTL_DATA=DIR OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/flute_lr_mnist.py
        [--rounds 100] [--device cpu]

Reads ``mnist.npz`` (Keras layout) from ``$SHEAF_FMTL_DATA``, pools its 60,000 training images as
flat pixels in [0, 1], splits them IID over 1,000 clients (``partition = iid``) and runs FedAvg with
``clients_per_round = 10``, one local epoch of batch 10, ``alpha = 0.03``, no L2 term and no
standardisation. Differences from FLUTE's protocol: each client's test split is a stratified quarter
of its own 60 images (this library's protocol; FLUTE scores the 10,000 MNIST test images), and half
of the clients keep 20% of their training images (the paper's protocol). Prints one JSON object: the
mean test accuracy over the clients, the wall seconds of the whole run (data split included) and of
its rounds, and FLUTE's published numbers beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import sheaf_fmtl

#: FLUTE (Garcia et al., 2022), LR-MNIST: seconds of the whole run as published.
PUBLISHED = {"FLUTE, CPU": 200.0, "FLUTE, GPU": "86-95", "Flower 1.0, CPU": 1814.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    folder = os.environ.get("SHEAF_FMTL_DATA")
    if not folder:
        raise SystemExit("set SHEAF_FMTL_DATA to the folder holding mnist.npz")
    with np.load(Path(folder) / "mnist.npz") as z:
        x = (z["x_train"].reshape(len(z["x_train"]), -1) / 255.0).astype(np.float32)
        y = z["y_train"].astype(np.int64)
    start = time.perf_counter()
    result = sheaf_fmtl.run(
        data=(x, y),
        partition="iid",
        clients=1000,
        algorithm="fedavg",
        model="logistic",
        graph="star",  # (a server baseline does not use the client graph: build a sparse one)
        clients_per_round=10,
        rounds=args.rounds,
        eval_every=args.rounds,
        batch_size=10,
        local_epochs=1,
        alpha=0.03,
        l2=0.0,
        standardize=False,
        device=args.device,
    )
    wall = time.perf_counter() - start
    summary = result.summary
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "device": args.device,
                "test_accuracy_mean_over_clients": summary["final"],
                "wall_s_run": round(wall, 2),
                "wall_s_rounds": summary.get("wall_seconds"),
                "published_wall_s": PUBLISHED,
            }
        )
    )


if __name__ == "__main__":
    main()
