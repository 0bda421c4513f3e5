"""How fast a batched CNN cohort could be at best on this machine: a compute roofline.

Batching clients removes per-call overhead, not arithmetic. A client's gradient needs the
multiply-adds (MACs) of its convolutions and linear layers three times (forward, weight gradient,
input gradient; no input gradient for the first layer). If a per-client loop already runs those
FLOPs near the machine's matrix-multiply rate, no batching can beat it by much:

    best speed-up = (loop seconds) / (gradient FLOPs / GEMM rate)

where the GEMM rate is measured on the largest layer's own im2col shape (its best case).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch
from torch import nn

from .timing import timed

Layer = tuple[str, int, tuple[int, int, int]]


def layer_macs(module: nn.Module, input_shape: tuple[int, ...]) -> list[Layer]:
    """Per Conv2d/Linear layer, in forward order: ``(name, MACs per sample, (M, K, N))`` where
    ``M x K @ K x N`` is the layer's forward as one matrix product for one sample (im2col)."""
    out: list[Layer] = []
    hooks = []
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Conv2d):

            def conv_hook(m: nn.Module, _: Any, y: torch.Tensor, name: str = name) -> None:
                assert isinstance(m, nn.Conv2d)
                k = (m.in_channels // m.groups) * math.prod(m.kernel_size)
                rows = math.prod(y.shape[2:])
                out.append((name, rows * k * m.out_channels, (rows, k, m.out_channels)))

            hooks.append(layer.register_forward_hook(conv_hook))
        elif isinstance(layer, nn.Linear):

            def linear_hook(m: nn.Module, _: Any, y: torch.Tensor, name: str = name) -> None:
                assert isinstance(m, nn.Linear)
                out.append((name, m.in_features * m.out_features, (1, m.in_features, m.out_features)))

            hooks.append(layer.register_forward_hook(linear_hook))
    param = next(module.parameters(), None)  # probe on the module's device (CUDA modules too)
    try:
        with torch.no_grad():
            module(torch.zeros(1, *input_shape, device=None if param is None else param.device))
    finally:
        for h in hooks:
            h.remove()
    return out


def gradient_flops(module: nn.Module, input_shape: tuple[int, ...], batch: int) -> int:
    """FLOPs (2 per MAC) of one mini-batch gradient: forward + weight gradient for every layer,
    input gradient for every layer but the first (the data needs none)."""
    macs = [m for _, m, _ in layer_macs(module, input_shape)]
    if not macs:
        return 0
    return 2 * batch * (3 * sum(macs) - macs[0])


def gemm_rate(m: int, k: int, n: int, device: str = "cpu", seconds: float = 0.3) -> float:
    """FLOP/s of the fastest of repeated ``[m, k] @ [k, n]`` products (after a warm-up)."""
    a = torch.randn(m, k, device=device)
    b = torch.randn(k, n, device=device)
    a @ b
    best, spent = math.inf, 0.0
    while spent < seconds:
        dt = timed(lambda: a @ b, device)
        best, spent = min(best, dt), spent + dt
    return 2 * m * k * n / best


def batched_conv_gemm_rate(
    m: int, k: int, n: int, group: int, device: str = "cpu", repeats: int = 7
) -> float:
    """FLOP/s of the three products of a convolution's forward and backward as the batched cohort
    runs them, ``group`` clients per ``bmm``: ``cols @ W``, ``cols^T @ dY`` and ``dY @ W^T``
    (median time of each, summed)."""
    cols = torch.randn(group, m, k, device=device)
    w = torch.randn(group, k, n, device=device)
    dy = torch.randn(group, m, n, device=device)
    forms = [
        lambda: torch.bmm(cols, w),
        lambda: torch.bmm(cols.transpose(1, 2), dy),
        lambda: torch.bmm(dy, w.transpose(1, 2)),
    ]
    total = 0.0
    for f in forms:
        f()  # type: ignore[no-untyped-call]
        total += statistics.median(timed(f, device) for _ in range(repeats))
    return 3 * 2 * group * m * k * n / total


def cohort_roofline(
    module: nn.Module,
    input_shape: tuple[int, ...],
    batch: int,
    clients: int,
    loop_s: float,
    device: str = "cpu",
    group: int = 4,
) -> dict[str, float]:
    """The loop's achieved FLOP rate; the machine's GEMM rate on the largest layer's shape, best
    case (one product) and as the batched cohort runs it (``group`` clients per ``bmm``, forward
    and both backward forms, median); and the speed-up over the loop a batched cohort would reach
    if it ran every FLOP at each rate."""
    layers = layer_macs(module, input_shape)
    _, _, (rows, k, n) = max(layers, key=lambda t: t[1])
    rate = gemm_rate(rows * batch, k, n, device)
    flops = clients * gradient_flops(module, input_shape, batch)
    batched = batched_conv_gemm_rate(rows * batch, k, n, group, device)
    return {
        "gradient_gflop": flops / 1e9,
        "loop_gflops": flops / loop_s / 1e9,
        "gemm_gflops": rate / 1e9,
        "best_speedup": loop_s / (flops / rate),
        "bmm_gflops": batched / 1e9,
        "bmm_speedup": loop_s / (flops / batched),
    }
