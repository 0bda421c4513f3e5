"""Built-in generated data, so the default run needs no download.

``synthetic``: Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous
Networks" (FedProx, 2020): alpha controls how much local models differ, beta how much local
feature distributions differ; client sample counts follow a log-normal law.

``synthetic-hetero``: clients observe different subsets of one shared feature space, so model
sizes ``d_i`` differ, and their tasks are related through cluster models: ``W_k = sqrt(r) W_g +
sqrt(1 - r) W_private`` with ``r = relatedness`` in [0, 1]. This is the setting Sheaf-FMTL is for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import DatasetError, RawClient, RawFederated
from .registry import DataRequest, register

SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "alpha": 1.0,
    "beta": 1.0,
    "features": 60,
    "classes": 10,
    "min_samples": 50,
    "max_samples": 400,
}
HETERO_DEFAULTS: dict[str, Any] = {
    **SYNTHETIC_DEFAULTS,
    "features": 40,
    "classes": 5,
    "feature_counts": [16, 24, 32],
    "groups": 1,
    "relatedness": 0.9,
    "beta": 0.5,
    "min_samples": 20,
    "max_samples": 120,
}


def _options(defaults: Mapping[str, Any], given: Mapping[str, Any], name: str) -> dict[str, Any]:
    unknown = set(given) - set(defaults)
    if unknown:
        raise DatasetError(f"{name}: unknown option(s) {sorted(unknown)}; allowed: {sorted(defaults)}")
    opts = {**defaults, **given}
    if opts["alpha"] < 0 or opts["beta"] < 0:
        raise DatasetError(f"{name}: alpha and beta must be >= 0")
    if opts["classes"] < 2 or opts["features"] < 1:
        raise DatasetError(f"{name}: need classes >= 2 and features >= 1")
    if not 2 <= opts["min_samples"] <= opts["max_samples"]:
        raise DatasetError(f"{name}: need 2 <= min_samples <= max_samples")
    return opts


def _sample_counts(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    """Log-normal sample counts as in the FedProx generator (lognormal(4, 2) + lo), capped at ``hi``."""
    return np.minimum(rng.lognormal(4.0, 2.0, n).astype(np.int64) + lo, hi)


def _features(rng: np.random.Generator, mean: np.ndarray, n: int) -> np.ndarray:
    """Gaussian features with the generator's diagonal covariance ``Sigma_jj = j^-1.2``."""
    d = len(mean)
    scale = np.arange(1, d + 1, dtype=np.float64) ** (-1.2 / 2)
    return mean + rng.standard_normal((n, d)) * scale


@register("synthetic")
def synthetic(request: DataRequest) -> RawFederated:
    o = _options(SYNTHETIC_DEFAULTS, request.options, "synthetic")
    n_clients = request.clients or 30
    rng = np.random.default_rng(np.random.SeedSequence([request.seed, 101]))
    d, c = o["features"], o["classes"]
    counts = _sample_counts(rng, n_clients, o["min_samples"], o["max_samples"])
    mean_w = rng.normal(0.0, np.sqrt(o["alpha"]), n_clients) if o["alpha"] > 0 else np.zeros(n_clients)
    shift = rng.normal(0.0, np.sqrt(o["beta"]), n_clients) if o["beta"] > 0 else np.zeros(n_clients)
    clients = []
    for k in range(n_clients):
        w = rng.normal(mean_w[k], 1.0, (d, c))
        b = rng.normal(mean_w[k], 1.0, c)
        x = _features(rng, rng.normal(shift[k], 1.0, d), int(counts[k]))
        y = np.argmax(x @ w + b, axis=1)
        clients.append(RawClient(x.astype(np.float32), y.astype(np.int64)))
    return RawFederated("synthetic", "classification", c, tuple(clients))


@register("synthetic-hetero")
def synthetic_hetero(request: DataRequest) -> RawFederated:
    o = _options(HETERO_DEFAULTS, request.options, "synthetic-hetero")
    if not 0.0 <= o["relatedness"] <= 1.0:
        raise DatasetError("synthetic-hetero: relatedness must be in [0, 1]")
    if o["groups"] < 1:
        raise DatasetError("synthetic-hetero: groups must be >= 1")
    sizes = [int(s) for s in o["feature_counts"]]
    if not sizes or min(sizes) < 1 or max(sizes) > o["features"]:
        raise DatasetError(f"synthetic-hetero: feature_counts must lie in [1, features={o['features']}]")
    n_clients = request.clients or 20
    rng = np.random.default_rng(np.random.SeedSequence([request.seed, 202]))
    d, c, r = o["features"], o["classes"], o["relatedness"]
    counts = _sample_counts(rng, n_clients, o["min_samples"], o["max_samples"])
    group_w = rng.normal(0.0, 1.0, (o["groups"], d, c))
    group_b = rng.normal(0.0, 1.0, (o["groups"], c))
    clients = []
    for k in range(n_clients):
        g = k % o["groups"]
        w = np.sqrt(r) * group_w[g] + np.sqrt(1 - r) * rng.normal(0.0, 1.0, (d, c))
        b = np.sqrt(r) * group_b[g] + np.sqrt(1 - r) * rng.normal(0.0, 1.0, c)
        shift = rng.normal(0.0, np.sqrt(o["beta"]), d) if o["beta"] > 0 else np.zeros(d)
        x_full = _features(rng, shift, int(counts[k]))
        y = np.argmax(x_full @ w + b, axis=1)
        seen = np.sort(rng.choice(d, size=sizes[k % len(sizes)], replace=False))
        clients.append(RawClient(x_full[:, seen].astype(np.float32), y.astype(np.int64)))
    return RawFederated("synthetic-hetero", "classification", c, tuple(clients))
