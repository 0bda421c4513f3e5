"""The cohort benchmark: one batched ``Cohort.gradients`` call against a per-client autograd loop."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

import torch

from ..federation import GROUP_CLIENTS, Cohort, Cohorts, build_federation
from ..reference import loop as ref
from .roofline import cohort_roofline
from .settings import COHORT_CLIENTS, PAPER
from .synthetic import make_dataset
from .timing import timed


def cohort_benchmark(
    clients: int = COHORT_CLIENTS,
    batch_size: int = 32,
    repeats: int = 5,
    device: str = "cpu",
    samples: int = 400,
    model: str = "cnn",
) -> dict[str, Any]:
    """Local gradients of ``clients`` CNN clients on 1x28x28 inputs: one batched
    ``Cohort.gradients`` call per cohort vs a per-client autograd loop, on the same mini-batch rows;
    the speed-up is the median ratio over interleaved pairs of runs. ``model``: one architecture
    (one cohort of ``clients``) or a comma list assigned round-robin (one cohort per architecture).

    On CUDA, cuDNN's TF32 convolutions are turned off while it runs, so that the loop computes in
    float32 like the batched path (whose products are float32 ``bmm``) and the two can be compared."""
    s = dataclasses.replace(PAPER, name="cohort", clients=clients, samples=samples)
    fed = build_federation(make_dataset(s), model, l2=1e-4, device=device)
    b, parts = _mini_batches(fed, batch_size)

    def loop() -> list[torch.Tensor]:
        return [
            torch.stack([ref.client_gradient(fed, int(i), t[k], idx[k]) for k, i in enumerate(c.clients)])
            for c, t, idx, _ in parts
        ]

    def batched() -> list[torch.Tensor]:
        return [c.gradients(thetas, batch)[0] for c, thetas, _, batch in parts]

    cuda = device.startswith("cuda")
    err, pairs = _compare_and_time(batched, loop, repeats, device)
    t_vmap = statistics.median(t for t, _ in pairs)  # slow drifts of a shared machine hit both alike
    t_loop = statistics.median(t for _, t in pairs)
    out: dict[str, Any] = {
        "model": model,
        "clients": clients,
        "cohort_sizes": [c.size for c in fed.cohorts],
        "batch_size": b,
        "dim": fed.cohorts[0].dim if len(fed.cohorts) == 1 else [c.dim for c in fed.cohorts],
        "group": [getattr(c, "group", GROUP_CLIENTS) for c in fed.cohorts],
        "cudnn_tf32": False if cuda else None,
        "vmap_s": t_vmap,
        "loop_s": t_loop,
        "speedup": statistics.median(loop_t / vmap_t for vmap_t, loop_t in pairs),
        "max_rel_diff": err,
    }
    if len(fed.cohorts) == 1:
        cohort = fed.cohorts[0]
        out["roofline"] = cohort_roofline(
            cohort.module,
            s.feature_shape,
            b,
            clients,
            t_loop,
            device,
            group=getattr(cohort, "group", GROUP_CLIENTS),
        )
    return out


#: Per cohort: the cohort, its initial thetas, each client's mini-batch rows and that batch.
_Part = tuple[Cohort, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _mini_batches(fed: Cohorts, batch_size: int) -> tuple[int, list[_Part]]:
    """``(b, parts)``: one mini-batch of ``b`` rows per client (``batch_size``, or fewer when a
    client has fewer samples), drawn with a fixed seed, and each cohort's initial thetas."""
    gen = torch.Generator().manual_seed(0)
    b = min(batch_size, min(int(c.n_train.min()) for c in fed.cohorts))
    parts = []
    for cohort in fed.cohorts:
        thetas = cohort.init_thetas(0)
        n_min = int(cohort.n_train.min())
        idx = torch.stack([torch.randperm(n_min, generator=gen)[:b] for _ in range(cohort.size)])
        idx = idx.to(thetas.device)
        ones = torch.ones(idx.shape, device=idx.device)
        parts.append((cohort, thetas, idx, (*cohort.train_rows(idx), ones)))
    return b, parts


def _compare_and_time(
    batched: Callable[[], list[torch.Tensor]],
    loop: Callable[[], list[torch.Tensor]],
    repeats: int,
    device: str,
) -> tuple[float, list[tuple[float, float]]]:
    """``(max relative difference of the batched gradients to the loop's, [(batched s, loop s)]
    for ``repeats`` interleaved pairs)``, with cuDNN's TF32 off on CUDA meanwhile."""
    tf32 = torch.backends.cudnn.allow_tf32
    if device.startswith("cuda"):
        torch.backends.cudnn.allow_tf32 = False
    try:
        looped = loop()  # also the warm-up of both paths
        err = max(
            float((g - ref_g).abs().max() / ref_g.abs().max())
            for g, ref_g in zip(batched(), looped, strict=True)
        )
        pairs = [(timed(batched, device), timed(loop, device)) for _ in range(repeats)]  # interleaved:
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    return err, pairs
