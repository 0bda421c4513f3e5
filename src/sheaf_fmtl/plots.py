"""Figures from recorded results only (``metrics.csv``, ``config.yaml``, ``checkpoint.pt``)."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from .metrics.recorder import read_metrics  # noqa: E402


def _label(run_dir: Path) -> str:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    label = cfg["algorithm"]
    if cfg["algorithm"] == "sheaf-fmtl":
        label += f" (gamma={cfg['gamma']:g})"
    return label


ALGORITHM_NAMES = {"sheaf-fmtl": "Sheaf-FMTL", "local": "local training", "dfedu": "dFedU", "dpsgd": "D-PSGD"}


def _config(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text())


def _long_label(run_dir: Path) -> str:
    """``Sheaf-FMTL (gamma=0.1, learned maps)``, ``dFedU``, ``local training`` ..."""
    cfg = _config(run_dir)
    name = ALGORITHM_NAMES.get(cfg["algorithm"], cfg["algorithm"])
    if cfg["algorithm"] == "sheaf-fmtl":
        maps = "learned maps" if cfg.get("eta", 0) > 0 and cfg.get("lam", 0) > 0 else "fixed maps"
        name += f" (gamma={cfg['gamma']:g}, {maps})"
    return name


def _metric_name(run_dir: Path) -> str:
    summary = run_dir / "summary.json"
    if summary.is_file():
        return "test MSE" if json.loads(summary.read_text()).get("metric") == "mse" else "test accuracy"
    return "test metric"


def plot_runs(run_dirs: Sequence[str | Path], out_dir: str | Path | None = None) -> list[Path]:
    """Test metric vs rounds and vs transmitted bits (all runs on one figure each), and one
    ``||P_ij||_F`` heatmap per run that has learned maps. Returns the PNG paths written."""
    runs = [Path(r) for r in run_dirs]
    for r in runs:
        if not (r / "metrics.csv").is_file():
            raise FileNotFoundError(f"{r} is not a run folder (no metrics.csv)")
    out = Path(out_dir) if out_dir is not None else runs[0]
    out.mkdir(parents=True, exist_ok=True)
    ylabel = _metric_name(runs[0])
    written = []

    fig, (ax_r, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        m = read_metrics(r)
        label = _label(r)
        ax_r.plot(m["round"], m["test_metric"], marker=".", label=label)
        bits = m["transmitted_bits"]
        if max(bits, default=0) > 0:
            pts = [(b, v) for b, v in zip(bits, m["test_metric"], strict=True) if b > 0 and not math.isnan(v)]
            ax_b.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
        elif m["test_metric"]:
            ax_b.axhline(m["test_metric"][-1], ls="--", color="gray", label=f"{label} (no communication)")
    ax_r.set(xlabel="communication round", ylabel=ylabel, title=f"{ylabel} vs rounds")
    ax_b.set(xlabel="transmitted bits (whole network)", ylabel=ylabel, title=f"{ylabel} vs transmitted bits")
    ax_b.set_xscale("log")
    for ax in (ax_r, ax_b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "metric_vs_rounds_and_bits.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    for r in runs:
        ckpt = r / "checkpoint.pt"
        if not ckpt.is_file():
            continue
        norms = torch.load(ckpt, weights_only=True).get("map_norms")
        if norms is None:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 4.5))
        im = ax.imshow(norms.numpy(), cmap="viridis")
        fig.colorbar(im, ax=ax, label=r"$\|P_{ij}\|_F$")
        ax.set(xlabel="neighbour j", ylabel="client i", title=f"Restriction map norms: {_label(r)}")
        fig.tight_layout()
        path = out / f"map_norms_{r.name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


DemoCurve = str | Path | tuple[str | Path, str]  # a run folder, or (run folder, legend label)

_COLORS = {"sheaf-fmtl": "tab:blue", "local": "tab:gray", "dfedu": "tab:orange", "dpsgd": "tab:green"}
_SPARE_COLORS = ("tab:green", "tab:purple", "tab:red", "tab:brown", "tab:pink", "tab:olive")


def plot_demo(
    panels: Sequence[tuple[str, Sequence[DemoCurve]]], out_dir: str | Path, title: str = ""
) -> Path:
    """One row per problem ``(name, curves)``, a curve being a run folder or ``(run folder, label)``:
    the test metric against rounds (left) and against the bits the whole network transmitted
    (right, log scale; runs that send nothing are a dashed line at their final value). Legends name
    the run (its label, or the algorithm and its maps) and the problem; each curve's final value is
    marked at the right end. Returns the PNG."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, curves in panels:
        pairs = [(Path(c[0]), c[1]) if isinstance(c, tuple) else (Path(c), None) for c in curves]
        rows.append((name, pairs))
    fig, axes = plt.subplots(len(rows), 2, figsize=(13, 4.6 * len(rows) + 0.8), squeeze=False, sharey="row")
    for (name, runs), (ax_r, ax_b) in zip(rows, axes, strict=True):
        ylabel = _metric_name(runs[0][0])
        summary = json.loads((runs[0][0] / "summary.json").read_text())
        dims = summary.get("model_dims", [])
        sizes = f"model sizes d_i = {', '.join(map(str, dims))}" if dims else ""
        used: set[str] = set()
        for r, given in runs:
            m = read_metrics(r)
            algorithm = _config(r)["algorithm"]
            label = given or _long_label(r)
            if m["test_metric"]:
                label += f": {m['test_metric'][-1]:.3f}"
            color = _COLORS.get(algorithm)
            if color is None or color in used:
                color = next(c for c in _SPARE_COLORS if c not in used)
            used.add(color)
            style = "--" if algorithm == "local" else "-"
            ax_r.plot(m["round"], m["test_metric"], style, marker=".", ms=4, color=color, label=label)
            pts = [
                (b, v)
                for b, v in zip(m["transmitted_bits"], m["test_metric"], strict=True)
                if b > 0 and not math.isnan(v)
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax_b.plot(xs, ys, marker=".", ms=4, color=color, label=label)
            elif m["test_metric"]:
                ax_b.axhline(m["test_metric"][-1], ls="--", color=color, label=f"{label} (sends nothing)")
        ax_r.set(xlabel="communication round", ylabel=ylabel,
                 title=f"{name} problem ({sizes}): {ylabel} vs rounds")
        ax_b.yaxis.set_tick_params(labelleft=True)
        ax_b.set(xlabel="bits transmitted by the whole network (log scale)", ylabel=ylabel,
                 title=f"{name} problem: {ylabel} vs transmitted bits")
        ax_b.set_xscale("log")
        for ax in (ax_r, ax_b):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right", title=f"{name} problem (final {ylabel})",
                      title_fontsize=8)
    if title:
        lines = [w for line in title.splitlines() for w in textwrap.wrap(line, 130)]
        fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    path = out / "demo.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
