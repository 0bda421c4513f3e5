"""Built-in generated data, so the default run needs no download.

``synthetic``: Synthetic(alpha, beta) of Li et al., "Federated Optimization in Heterogeneous
Networks" (FedProx, 2020): alpha controls how much local models differ, beta how much local
feature distributions differ; client sample counts follow a log-normal law.

``synthetic-hetero``: clients observe different subsets of one shared feature space, so model
sizes ``d_i`` differ, and their tasks are related through cluster models: ``W_k = sqrt(r) W_g +
sqrt(1 - r) W_private`` with ``r = relatedness`` in [0, 1]. This is the setting Sheaf-FMTL is for.

``synthetic-clusters``: the problem of ``sheaf-fmtl demo`` (``configs/demo.yaml``), built so that
collaboration matters: clients in contiguous blocks (clusters) share a task up to a small private
part, data are scarce and unequal (10 to 60 training samples, half of the clients keep 20% by the
protocol; 200 test samples each), labels carry some noise, and client ``k`` sees a random subset of
``feature_counts[k % len(feature_counts)]`` of the shared features (so model sizes differ).
``homogeneous=true`` is the same problem (same clients, samples, labels) with every feature seen,
so that baselines needing one model size (dFedU, D-PSGD) can run on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..spelling import setting
from .base import DataRequest, DatasetError, RawClient, RawFederated, register
from .options import check_options

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


def _need(name: str, o: Mapping[str, Any], key: str, ok: bool, rule: str) -> None:
    """DatasetError naming the option as it is set (``data.KEY``), its value and the rule."""
    if not ok:
        raise DatasetError(
            f"{name}: data.{key} = {o[key]!r}; expected {rule} (give {setting('data.' + key)})"
        )


def _samples(name: str, o: Mapping[str, Any]) -> None:
    _need(name, o, "min_samples", o["min_samples"] >= 2, "min_samples >= 2")
    rule = f"max_samples >= min_samples = {o['min_samples']}"
    _need(name, o, "max_samples", o["max_samples"] >= o["min_samples"], rule)


def _options(defaults: Mapping[str, Any], given: Mapping[str, Any], name: str) -> dict[str, Any]:
    opts = check_options(name, given, defaults)
    for key in ("alpha", "beta"):
        _need(name, opts, key, opts[key] >= 0, f"{key} >= 0")
    _need(name, opts, "classes", opts["classes"] >= 2, "classes >= 2")
    _need(name, opts, "features", opts["features"] >= 1, "features >= 1")
    _samples(name, opts)
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
    return RawFederated("synthetic", "classification", c, tuple(clients), generated=True)


@register("synthetic-hetero")
def synthetic_hetero(request: DataRequest) -> RawFederated:
    o = _options(HETERO_DEFAULTS, request.options, "synthetic-hetero")
    _need("synthetic-hetero", o, "relatedness", 0.0 <= o["relatedness"] <= 1.0, "0 <= relatedness <= 1")
    _need("synthetic-hetero", o, "groups", o["groups"] >= 1, "groups >= 1")
    sizes = [int(s) for s in o["feature_counts"]]
    ok = bool(sizes) and min(sizes) >= 1 and max(sizes) <= o["features"]
    _need("synthetic-hetero", o, "feature_counts", ok, f"counts in [1, features = {o['features']}]")
    n_clients = request.clients or 20
    rng = np.random.default_rng(np.random.SeedSequence([request.seed, 202]))
    d, c, r = o["features"], o["classes"], o["relatedness"]
    counts = _sample_counts(rng, n_clients, o["min_samples"], o["max_samples"])
    group_w = rng.normal(0.0, 1.0, (o["groups"], d, c))
    group_b = rng.normal(0.0, 1.0, (o["groups"], c))
    clients, features = [], []
    for k in range(n_clients):
        g = k % o["groups"]
        w = np.sqrt(r) * group_w[g] + np.sqrt(1 - r) * rng.normal(0.0, 1.0, (d, c))
        b = np.sqrt(r) * group_b[g] + np.sqrt(1 - r) * rng.normal(0.0, 1.0, c)
        shift = rng.normal(0.0, np.sqrt(o["beta"]), d) if o["beta"] > 0 else np.zeros(d)
        x_full = _features(rng, shift, int(counts[k]))
        y = np.argmax(x_full @ w + b, axis=1)
        seen = np.sort(rng.choice(d, size=sizes[k % len(sizes)], replace=False))
        clients.append(RawClient(x_full[:, seen].astype(np.float32), y.astype(np.int64)))
        features.append(seen.astype(np.int64))
    return RawFederated(
        "synthetic-hetero", "classification", c, tuple(clients), generated=True, features=tuple(features)
    )


CLUSTERS_DEFAULTS: dict[str, Any] = {
    "features": 24,
    "classes": 2,
    "groups": 3,  # clusters of clients with related tasks: contiguous blocks of client indices
    "relatedness": 0.9,  # within a cluster: W_k = sqrt(r) W_cluster + sqrt(1 - r) W_private
    "feature_counts": [12, 18, 24],  # client k sees feature_counts[k % len] random features
    "min_samples": 10,  # training samples per client, uniform in [min_samples, max_samples]
    "max_samples": 60,
    "test_samples": 200,  # per client, from the same distribution (a fixed test split)
    "label_noise": 0.1,  # fraction of labels (train and test) drawn uniformly at random
    "homogeneous": False,  # every client sees every feature (same samples and labels)
}

CLUSTERS_CLIENTS = 30  # clients unless the run asks for another number


def _clusters_options(given: Mapping[str, Any]) -> dict[str, Any]:
    name = "synthetic-clusters"
    o = check_options(name, given, CLUSTERS_DEFAULTS, {"feature_counts": "int or ints"})
    _need(name, o, "classes", o["classes"] >= 2, "classes >= 2")
    _need(name, o, "features", o["features"] >= 1, "features >= 1")
    _need(name, o, "groups", o["groups"] >= 1, "groups >= 1")
    _need(name, o, "relatedness", 0.0 <= o["relatedness"] <= 1.0, "0 <= relatedness <= 1")
    _need(name, o, "label_noise", 0.0 <= o["label_noise"] < 1.0, "0 <= label_noise < 1")
    _samples(name, o)
    _need(name, o, "test_samples", o["test_samples"] >= 1, "test_samples >= 1")
    sizes = o["feature_counts"]
    if isinstance(sizes, int):
        sizes = [sizes]
    sizes = [int(s) for s in sizes]
    ok = bool(sizes) and min(sizes) >= 1 and max(sizes) <= o["features"]
    _need(name, o, "feature_counts", ok, f"counts in [1, features = {o['features']}]")
    o["feature_counts"] = sizes
    return o


def _seen_features(o: Mapping[str, Any], seed: int, n_clients: int) -> list[np.ndarray]:
    d = o["features"]
    if o["homogeneous"]:
        return [np.arange(d) for _ in range(n_clients)]
    out = []
    for k in range(n_clients):
        rng = np.random.default_rng(np.random.SeedSequence([seed, 303, 2, k]))
        size = o["feature_counts"][k % len(o["feature_counts"])]
        out.append(np.sort(rng.choice(d, size, replace=False)))
    return out


def clusters_feature_sets(
    options: Mapping[str, Any], seed: int, clients: int | None = None
) -> list[np.ndarray]:
    """Which shared features each client of ``synthetic-clusters`` sees (its columns, in order)."""
    return _seen_features(_clusters_options(options), seed, clients or CLUSTERS_CLIENTS)


def clusters_groups(clients: int | None = None, groups: int = CLUSTERS_DEFAULTS["groups"]) -> list[int]:
    """The cluster of each client of ``synthetic-clusters`` (contiguous blocks of client indices)."""
    n = clients or CLUSTERS_CLIENTS
    return [k * groups // n for k in range(n)]


def describe_clusters(options: Mapping[str, Any], clients: int | None = None) -> str:
    """One line saying what ``synthetic-clusters`` with ``options`` is (for titles and logs)."""
    o = _clusters_options(options)
    seen = (
        "every feature"
        if o["homogeneous"]
        else (f"random subsets of {'/'.join(map(str, o['feature_counts']))} of the {o['features']} features")
    )
    return (
        f"{clients or CLUSTERS_CLIENTS} clients in {o['groups']} clusters of related {o['classes']}-class "
        f"tasks, {o['min_samples']}-{o['max_samples']} training samples each (half keep 20%), "
        f"{o['label_noise']:.0%} label noise; clients see {seen}"
    )


@register("synthetic-clusters")
def synthetic_clusters(request: DataRequest) -> RawFederated:
    o = _clusters_options(request.options)
    n_clients = request.clients or CLUSTERS_CLIENTS
    d, c, r = o["features"], o["classes"], o["relatedness"]
    # Three independent streams (cluster models and sample counts; each client's task, samples and
    # labels; each client's feature subset), so ``homogeneous`` changes nothing but the columns seen.
    rng = np.random.default_rng(np.random.SeedSequence([request.seed, 303, 0]))
    cluster_w = rng.normal(0.0, 1.0, (o["groups"], d, c))
    counts = rng.integers(o["min_samples"], o["max_samples"] + 1, n_clients)
    seen = _seen_features(o, request.seed, n_clients)
    groups = clusters_groups(n_clients, o["groups"])
    clients = []
    for k in range(n_clients):
        crng = np.random.default_rng(np.random.SeedSequence([request.seed, 303, 1, k]))
        w = np.sqrt(r) * cluster_w[groups[k]] + np.sqrt(1 - r) * crng.normal(0.0, 1.0, (d, c))
        n, n_test = int(counts[k]), int(o["test_samples"])
        x = crng.standard_normal((n + n_test, d))
        y = np.argmax(x @ w, axis=1)
        noisy = crng.random(n + n_test) < o["label_noise"]
        y = np.where(noisy, crng.integers(0, c, n + n_test), y).astype(np.int64)
        xs = x[:, seen[k]].astype(np.float32)
        clients.append(RawClient(xs[:n], y[:n], xs[n:], y[n:]))
    features = tuple(np.asarray(f, np.int64) for f in seen)
    return RawFederated(
        "synthetic-clusters", "classification", c, tuple(clients), generated=True, features=features
    )
