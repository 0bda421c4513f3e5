"""Checks that need a CUDA device; every test here is skipped, with its reason, without one.

CPU stays the default and what the rest of the suite tests. Where CUDA exists:

- no host-device synchronisation inside a round: ``Simulation.step()`` (after one warm-up round, whose
  first calls cache device-side index tensors) runs under ``torch.cuda.set_sync_debug_mode``, for
  Sheaf-FMTL (compact and literal messages, deferred map folds, several cohorts, bfloat16 maps, local
  epochs, CNN cohorts) and the baselines. The mode is ``"warn"`` and every warning is collected with
  the Python stack that raised it, so that one GPU run lists *all* sync points rather than the first
  (``"error"`` stops at the first); the test fails when the list is not empty. Evaluation, building
  and :meth:`Simulation.finite` (one read of the divergence flags, by design) stay outside the check;
- the same config on ``cpu`` and ``cuda`` gives the same iterates and test metric up to float
  rounding (batches and initial values are drawn from CPU generators on both);
- the batched CNN cohort gradients on CUDA equal a per-client autograd loop on CUDA;
- a whole ``run`` (evaluation, checkpoint) works on CUDA.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import RunConfig, validate
from sheaf_fmtl.config.schema import key_fields
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.reference import loop as ref
from sheaf_fmtl.runtime.engine.simulate import Simulation, build_simulation
from sheaf_fmtl.runtime.run.loop import run
from sheaf_fmtl.sheaf.graph import make_graph

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (torch.cuda.is_available() is False); the CPU paths are tested elsewhere",
)

FIELDS = set(key_fields())
SYNC_WARNING = "synchronizing CUDA operation"  # c10::cuda::warn_or_error_on_sync


def config(**kw: Any) -> RunConfig:
    unknown = set(kw) - FIELDS
    if unknown:
        pytest.skip(f"config keys {sorted(unknown)} do not exist in this version")
    base = {"stability_check": False} if "stability_check" in FIELDS else {}
    return validate(RunConfig(**{**base, **kw}))


def image_dataset(clients: int = 6, shape: tuple[int, ...] = (1, 16, 16), n: int = 48) -> FederatedDataset:
    """Random images, labels from a random linear teacher (learnable, so the metric moves)."""
    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(int(np.prod(shape)), 3))
    splits = []
    for _ in range(clients):
        x = rng.normal(size=(n + n // 2, *shape)).astype(np.float32)
        y = (x.reshape(len(x), -1) @ teacher).argmax(1).astype(np.int64)
        splits.append(ClientSplit(x[:n], y[:n], x[n:], y[n:]))
    return FederatedDataset("images", "classification", 3, tuple(splits))


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str
    kw: dict[str, Any]
    model: str | None = None  # set: a CNN cohort on image_dataset(clients), complete graph
    clients: int = 6
    rounds: int = 6  # rounds under the sync check (after the warm-up round)


SYNTH = {"dataset": "synthetic", "clients": 8, "graph_p": 0.5, "batch_size": 16, "lam": 0.01, "alpha": 0.05}
# CNNs on 1x16x16 images have 20k-40k parameters: gamma 0.001 keeps the maps at tens of MB
CNN = {"batch_size": 8, "gamma": 0.001, "lam": 0.01, "alpha": 0.05}
PROBLEMS = [
    Problem("sheaf-compact-defer3", {**SYNTH, "map_defer": 3, "gamma": 0.3, "eta": 0.01}, rounds=7),
    Problem("sheaf-literal-defer2", {**SYNTH, "map_defer": 2, "message_mode": "literal"}),
    Problem("sheaf-fixed-maps", {**SYNTH, "eta": 0.0}),
    Problem("sheaf-hetero-cohorts", {**SYNTH, "dataset": "synthetic-hetero", "map_defer": 2}),
    Problem("sheaf-bf16", {**SYNTH, "map_defer": 3, "map_dtype": "bfloat16"}, rounds=7),
    Problem("sheaf-local-steps2", {**SYNTH, "map_defer": 2, "local_steps": 2}),
    Problem("sheaf-epochs", {**SYNTH, "map_defer": 2, "local_epochs": 1}, rounds=4),
    Problem("sheaf-cnn", {**CNN, "map_defer": 2}, "cnn"),
    Problem("sheaf-cnn-hetero", {**CNN, "map_defer": 2}, "cnn-small,cnn-medium,cnn-large"),
    Problem("dfedu", {**SYNTH, "algorithm": "dfedu"}),
    Problem("dpsgd", {**SYNTH, "algorithm": "dpsgd"}),
    Problem("dpsgd-atc-steps2", {**SYNTH, "algorithm": "dpsgd", "dpsgd_order": "atc", "local_steps": 2}),
    Problem("local", {**SYNTH, "algorithm": "local"}),
    Problem("local-cnn", {"algorithm": "local", "batch_size": 8, "alpha": 0.05}, "cnn"),
    Problem("fedavg", {**SYNTH, "algorithm": "fedavg"}),
    Problem("ditto", {**SYNTH, "algorithm": "ditto"}),
    Problem("pfedme", {**SYNTH, "algorithm": "pfedme"}),
    Problem("perfedavg", {**SYNTH, "algorithm": "perfedavg"}),
    Problem("pfedgraph", {**SYNTH, "algorithm": "pfedgraph"}),
    Problem("dpfl", {**SYNTH, "algorithm": "dpfl", "dpfl_period": 1}),
    Problem("fedavg-ft", {**SYNTH, "algorithm": "fedavg-ft", "local_epochs": 1}),
    Problem("dpsgd-ft", {**SYNTH, "algorithm": "dpsgd-ft", "local_epochs": 1}),
    Problem("partial-cnn", {"algorithm": "partial", "batch_size": 8, "alpha": 0.05}, "cnn"),
]
BY_NAME = {p.name: p for p in PROBLEMS}


def build(p: Problem, device: str) -> Simulation:
    cfg = config(**p.kw, device=device, **({"model": p.model} if p.model else {}))
    if p.model is None:
        return build_simulation(cfg)
    fed = build_federation(image_dataset(p.clients), p.model, l2=cfg.l2, device=device)
    return build_simulation(cfg, fed=fed, graph=make_graph("complete", p.clients))


@contextlib.contextmanager
def host_syncs() -> Iterator[list[str]]:
    """Collect every synchronising CUDA call made inside the block, each with the Python stack (the
    frames of this library) that made it. ``set_sync_debug_mode("warn")`` makes PyTorch warn on
    each; the warnings are caught here, not shown."""
    found: list[str] = []

    def hook(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if SYNC_WARNING in str(message):
            stack = [f for f in traceback.extract_stack()[:-1] if "sheaf_fmtl" in f.filename]
            where = " <- ".join(
                f"{f.filename.split('sheaf_fmtl/')[-1]}:{f.lineno} {f.name}" for f in stack[::-1][:4]
            )
            found.append(f"{filename}:{lineno}: {where or '(no library frame)'}")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = hook
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()


def _summary(found: list[str]) -> str:
    counts: dict[str, int] = {}
    for f in found:
        counts[f] = counts.get(f, 0) + 1
    return "\n".join(f"  {n}x {where}" for where, n in counts.items())


# ---------------------------------------------------------------------------------- the detector


def test_sync_detector_sees_syncs_and_tells_which_copies_sync() -> None:
    """The detector works (positive controls), and which host->device copies count as a sync:
    a blocking copy does (``memcpy_and_sync``), a ``non_blocking`` one, even from pageable memory,
    does not (``cudaMemcpyAsync``; the CUDA runtime stages pageable memory before it returns)."""
    x = torch.zeros(4, device="cuda")
    host = torch.rand(1000)
    outcome = {}
    for name, fn in {
        "item": lambda: x.sum().item(),
        "blocking h2d": lambda: host.to("cuda"),
        "non_blocking h2d (pageable)": lambda: host.to("cuda", non_blocking=True),
        "non_blocking h2d (pinned)": lambda: host.pin_memory().to("cuda", non_blocking=True),
        "rand(generator, pin_memory) + non_blocking h2d": lambda: torch.rand(
            1000, generator=torch.Generator().manual_seed(0), pin_memory=True
        ).to("cuda", non_blocking=True),
        "cuda gather with a cpu index": lambda: x[torch.tensor([0, 2])],
        "cuda setitem with a cpu index": lambda: x.__setitem__(torch.tensor([0, 2]), x[:2].clone()),
    }.items():
        with host_syncs() as found:
            fn()
        outcome[name] = len(found)
    print("sync counts:", outcome)
    assert outcome["item"] >= 1 and outcome["blocking h2d"] >= 1, outcome
    assert outcome["non_blocking h2d (pageable)"] == 0 and outcome["non_blocking h2d (pinned)"] == 0, outcome
    assert outcome["rand(generator, pin_memory) + non_blocking h2d"] == 0, outcome


# ------------------------------------------------------------------------- no sync inside a round


@pytest.mark.parametrize("name", list(BY_NAME))
def test_no_host_sync_inside_a_round(name: str) -> None:
    p = BY_NAME[name]
    sim = build(p, "cuda")
    sim.step()  # warm-up: first calls put index tensors on the device (once)
    with host_syncs() as found:
        for _ in range(p.rounds):
            sim.step()
    assert not found, f"{len(found)} host-device syncs in {p.rounds} rounds of {name}:\n{_summary(found)}"
    assert sim.finite()  # outside the check: one read by design


# --------------------------------------------------------------------------- cpu vs cuda iterates


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative difference ``||a - b|| / ||b||`` in float64."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


@pytest.mark.parametrize(
    "name",
    ["sheaf-compact-defer3", "sheaf-hetero-cohorts", "sheaf-epochs", "sheaf-cnn", "dfedu", "dpsgd", "local"],
)
def test_cpu_and_cuda_give_the_same_iterates(name: str) -> None:
    p = BY_NAME[name]
    sims = {d: build(p, d) for d in ("cpu", "cuda")}
    for sim in sims.values():
        for _ in range(4):
            sim.step()
    cpu, gpu = sims["cpu"], sims["cuda"]
    for a, b in zip(gpu.state.thetas, cpu.state.thetas, strict=True):
        assert a.is_cuda and not b.is_cuda
        assert _close(a, b) < 1e-4, (name, _close(a, b))
    maps = getattr(cpu.state, "maps", None)
    if maps is not None:
        for a, b in zip(gpu.state.maps, maps, strict=True):
            assert _close(a, b) < 1e-4, (name, _close(a, b))
    ev_cpu, ev_gpu = cpu.evaluate(), gpu.evaluate()
    assert abs(ev_gpu["test_metric"] - ev_cpu["test_metric"]) <= 0.02, (ev_gpu, ev_cpu)
    assert ev_gpu["objective"] == pytest.approx(ev_cpu["objective"], rel=1e-4)


# ------------------------------------------------------------------ batched CNN gradients on cuda


@contextlib.contextmanager
def float32_convolutions() -> Iterator[None]:
    """cuDNN may run float32 convolutions in TF32 (10-bit mantissa); the loop must not, to compare."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def batched_vs_loop(model: str, device: str, kernel: str = "") -> list[tuple[float, float]]:
    """Per client: (share of gradient entries that agree to float32 rounding, relative difference)
    between ``Cohort.gradients`` (CNN kernel ``kernel``; empty: the device's default) and a
    per-client autograd loop on the same rows."""
    fed = build_federation(image_dataset(6, (1, 28, 28), n=40), model, l2=1e-3, device=device)
    (cohort,) = fed.cohorts
    if kernel:
        cohort.cnn_kernel = kernel
    thetas = cohort.init_thetas(0)
    noise = torch.randn(thetas.shape, generator=torch.Generator().manual_seed(1))
    thetas = thetas + 0.01 * noise.to(device)
    gen = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(int(n), generator=gen)[:8] for n in cohort.n_train.cpu()]).to(device)
    rows = torch.arange(cohort.size, device=device)[:, None]
    batch = (cohort.x_train[rows, idx], cohort.y_train[rows, idx], torch.ones(idx.shape, device=device))
    with float32_convolutions():
        g = cohort.gradients(thetas, batch)[0]
        loop = [ref.client_gradient(fed, int(i), thetas[k], idx[k]) for k, i in enumerate(cohort.clients)]
    assert g.device.type == torch.device(device).type and g.shape == (cohort.size, cohort.dim)
    out = []
    for k, r in enumerate(loop):
        close = (g[k] - r).abs() <= 1e-5 * r.abs().max() + 1e-4 * r.abs()
        out.append((float(close.double().mean()), _close(g[k], r)))
    return out


@pytest.mark.parametrize("model", ["cnn", "cnn-small", "cnn-medium", "cnn-large"])
def test_batched_cnn_gradients_equal_a_per_client_loop_on_cuda(model: str) -> None:
    # cuDNN's per-client convolutions and the batched im2col products sum in different orders: on
    # an H200, cnn-medium agreed to 1.7e-4 relative overall while 14% of its entries differed by more
    # than 1e-4 of themselves, so the whole gradient is compared, not entry by entry
    for k, (_, rel) in enumerate(batched_vs_loop(model, "cuda", kernel="im2col")):
        assert rel < 1e-3, (model, k, rel)


def test_cnn_cohorts_on_cuda_take_the_fused_step_by_default() -> None:
    # the faster of the two kernels on a GPU's R-MNIST-shaped round (benchmarks/gpu-round.sh)
    fed = build_federation(image_dataset(3, (1, 28, 28), n=8), "cnn", l2=1e-3, device="cuda")
    (cohort,) = fed.cohorts
    assert cohort.cnn_kernel == "fused" and cohort._fused_now()


@pytest.mark.parametrize("model", ["cnn", "cnn-large"])
def test_fused_cnn_gradients_equal_a_per_client_loop_on_cuda(model: str) -> None:
    # the fused step (grouped cuDNN convolutions, hand-written backward), TF32 off inside it
    for k, (_, rel) in enumerate(batched_vs_loop(model, "cuda", kernel="fused")):
        assert rel < 1e-3, (model, k, rel)


# ------------------------------------------------------------------------------ a whole run on cuda


def test_a_whole_run_on_cuda_writes_its_folder(tmp_path: Path) -> None:
    cfg = config(**SYNTH, map_defer=2, rounds=4, eval_every=2, device="cuda")
    summary = run(cfg, tmp_path, progress=False)
    assert summary["status"] == "ok" and 0.0 <= summary["final"] <= 1.0
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert all(not t.is_cuda for t in ckpt["thetas"]) and all(not m.is_cuda for m in ckpt.get("maps", []))
    assert float(ckpt["map_norms"].sum()) > 0
