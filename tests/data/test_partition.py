"""The partitioners of a pooled dataset (``partition=dirichlet|classes|iid``) against oracles: a
direct transcription of Flower Datasets' definitions (dicts and Python loops, as Flower writes them),
Flower's own partitioners when ``flwr-datasets`` is installed (test_partition_flower.py), and
properties (every sample once, alpha's effect, exact classes per client, seeds)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from sheaf_fmtl.data.base import DatasetError, PartitionSpec
from sheaf_fmtl.data.partition import classes, dirichlet, iid, split_pool


def _labels(n: int = 600, k: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, k, n)


def _oracle_dirichlet(targets, n_parts, alpha, seed, balance, min_size=10):
    """DirichletPartitioner's loop, written as Flower writes it (dicts of lists)."""
    rng = np.random.default_rng(seed)
    alphas = np.array([float(alpha)]).repeat(n_parts)
    avg = len(targets) / n_parts
    for _ in range(11):
        parts = {nid: [] for nid in range(n_parts)}
        for k in sorted(set(targets.tolist())):
            idx_k = np.nonzero(targets == k)[0]
            props = rng.dirichlet(alphas)
            share = {nid: props[nid] for nid in range(n_parts)}
            if balance:
                for nid in list(share):
                    if len(parts[nid]) > avg:
                        share[nid] = 0
                total = sum(share.values())
                share = {nid: p / total for nid, p in share.items()}
            cuts = (np.cumsum(list(share.values())) * len(idx_k)).astype(int)[:-1]
            for nid, chunk in enumerate(np.split(idx_k, cuts)):
                parts[nid].extend(chunk.tolist())
        if min(len(v) for v in parts.values()) >= min_size:
            break
    for v in parts.values():
        rng.shuffle(v)
    return [parts[i] for i in range(n_parts)]


def _oracle_classes(targets, n_parts, per, seed, mode):
    """PathologicalPartitioner's loop, written as Flower writes it."""
    rng = np.random.default_rng(seed)
    uniq = sorted(set(targets.tolist()))
    held = {pid: [] for pid in range(n_parts)}
    for pid in range(n_parts):
        if mode == "first-deterministic":
            held[pid].append(uniq[pid % len(uniq)])
            while len(held[pid]) < per:
                label = rng.choice(uniq, size=1)[0]
                if label not in held[pid]:
                    held[pid].append(label)
        elif mode == "deterministic":
            held[pid] = [uniq[(pid + i) % len(uniq)] for i in range(per)]
        else:
            held[pid] = rng.choice(uniq, size=per, replace=False).tolist()
    times = {u: sum(u in v for v in held.values()) for u in uniq}
    parts = {pid: [] for pid in range(n_parts)}
    for u in uniq:
        if times[u] == 0:
            continue
        chunks = np.array_split(np.where(targets == u)[0], times[u])
        j = 0
        for pid in range(n_parts):
            if u in held[pid]:
                parts[pid].extend(chunks[j])
                j += 1
    for v in parts.values():
        rng.shuffle(v)
    return [parts[i] for i in range(n_parts)]


@pytest.mark.parametrize(("alpha", "balance"), [(0.1, False), (0.5, False), (5.0, False), (0.3, True)])
def test_dirichlet_is_flowers_definition_draw_for_draw(alpha: float, balance: bool) -> None:
    y = _labels()
    ours = dirichlet(y, 8, alpha, np.random.default_rng(42), self_balancing=balance)
    want = _oracle_dirichlet(y, 8, alpha, 42, balance)
    assert [p.tolist() for p in ours] == [list(map(int, w)) for w in want]


@pytest.mark.parametrize("mode", ["first-deterministic", "random", "deterministic"])
def test_classes_is_flowers_definition_draw_for_draw(mode: str) -> None:
    y = _labels()
    ours = classes(y, 12, 3, np.random.default_rng(7), mode)
    want = _oracle_classes(y, 12, 3, 7, mode)
    assert [p.tolist() for p in ours] == [list(map(int, w)) for w in want]


def test_iid_is_contiguous_shards_as_datasets_shard() -> None:
    """``Dataset.shard(num_shards, index, contiguous=True)``: ``div = n // k``, the first ``n % k``
    shards one longer, in order (hand computation for n = 10, k = 3)."""
    assert [p.tolist() for p in iid(10, 3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]


@pytest.mark.parametrize("method", ["dirichlet", "classes", "iid"])
def test_every_sample_is_assigned_once_and_seeds_reproduce(method: str) -> None:
    y = _labels(1000)
    spec = PartitionSpec(method, alpha=0.5, classes_per_client=2, class_assignment="first-deterministic")
    parts = split_pool(y, spec, 10, seed=3)
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(len(y)))  # (classes: every class is held: 10 >= K)
    again = split_pool(y, spec, 10, seed=3)
    other = split_pool(y, spec, 10, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def _mean_tv(y: np.ndarray, parts: list[np.ndarray], k: int = 10) -> float:
    glob = np.bincount(y, minlength=k) / len(y)
    local = [np.bincount(y[p], minlength=k) / len(p) for p in parts]
    return float(np.mean([0.5 * np.abs(p - glob).sum() for p in local]))


def test_alpha_moves_the_label_mix_from_concentrated_to_uniform() -> None:
    y = _labels(5000)
    tv = {a: _mean_tv(y, split_pool(y, PartitionSpec("dirichlet", alpha=a), 10, 0)) for a in (0.05, 1.0, 1e4)}
    assert tv[1e4] < 0.05 < tv[1.0] < tv[0.05]
    assert tv[0.05] > 0.5  # a few classes a client
    assert _mean_tv(y, split_pool(y, PartitionSpec("iid"), 10, 0)) < 0.1


def test_classes_gives_exactly_that_many_labels_per_client() -> None:
    y = _labels(2000)
    for mode in ("first-deterministic", "random", "deterministic"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            spec = PartitionSpec("classes", classes_per_client=2, class_assignment=mode)
            parts = split_pool(y, spec, 15, 1)
        assert [len(np.unique(y[p])) for p in parts] == [2] * 15
        left_out = sorted(set(range(10)) - set(np.concatenate([y[p] for p in parts]).tolist()))
        assert [str(w.message) for w in caught] == (
            [f"partition=classes: class(es) {left_out} are held by no client and left out of the data"]
            if left_out
            else []
        )


def test_impossible_partitions_are_refused_in_one_line() -> None:
    y = _labels(100)
    with pytest.raises(DatasetError, match="classes_per_client") as e:
        split_pool(y, PartitionSpec("classes", classes_per_client=11), 5, 0)
    assert "\n" not in str(e.value)
    with pytest.raises(DatasetError, match="clients"):
        split_pool(y, PartitionSpec("dirichlet"), 11, 0)  # 11 clients x 10 samples > 100
    with pytest.raises(DatasetError, match="fewer than 10"):
        split_pool(_labels(2000), PartitionSpec("dirichlet", alpha=0.001), 150, 0)
