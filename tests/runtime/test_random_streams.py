"""Every client and half-edge draws from its own stream: batches, initial models and maps do not
depend on which clients share a process (the placement), and a run's random state round-trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.data.base import ClientSplit, FederatedDataset
from sheaf_fmtl.federation import build_federation
from sheaf_fmtl.runtime.engine.simulate import build_simulation
from sheaf_fmtl.sheaf.graph import make_graph
from sheaf_fmtl.sheaf.layout import build_layout
from sheaf_fmtl.sheaf.maps import default_scale, init_maps
from sheaf_fmtl.streams import MAP, ClientStreams, stream, stream_seed


def make_dataset(n_clients: int, sizes: tuple[int, ...], dim: int = 4) -> FederatedDataset:
    """``n_clients`` clients of one architecture with ``sizes[i]`` training samples each."""
    rng = np.random.default_rng(0)
    clients = [
        ClientSplit(
            rng.normal(size=(n, dim)).astype(np.float32),
            rng.integers(0, 3, n),
            rng.normal(size=(5, dim)).astype(np.float32),
            rng.integers(0, 3, 5),
        )
        for n in sizes[:n_clients]
    ]
    return FederatedDataset("toy", "classification", 3, tuple(clients))


def _batches_of(fed, client: int, seed: int, steps: int, batch: int) -> list[torch.Tensor]:  # noqa: ANN001
    """The rows client ``client`` gets in ``steps`` mini-batches of a federation holding it."""
    fed = fed.with_streams(seed)
    cohort = fed.cohorts[int(fed.cohort_of[client])]
    row = int(fed.position[client])
    out = []
    for _ in range(steps):
        b = cohort.sample(batch, fed.batch_streams)
        out.append(b.x[row][b.mask[row] > 0])
    return out


def _sorted_rows(x: torch.Tensor) -> torch.Tensor:
    return x[np.lexsort(x.T.numpy()[::-1])]


def test_a_clients_batches_do_not_depend_on_who_shares_its_process() -> None:
    ds = make_dataset(n_clients=6, sizes=(30, 12, 40, 25, 8, 33))
    whole = build_federation(ds)
    for shard in ([2, 3], [2], [0, 2, 5]):
        part = build_federation(ds, clients=shard)
        assert (part.cohort_of >= 0).sum() == len(shard)
        a, b = _batches_of(whole, 2, 7, 4, 10), _batches_of(part, 2, 7, 4, 10)
        for x, y in zip(a, b, strict=True):  # the same samples (order within a batch may differ)
            torch.testing.assert_close(_sorted_rows(x), _sorted_rows(y), rtol=0, atol=0)
    other = _batches_of(whole, 2, 8, 1, 10)[0]  # another seed: another batch (the test can fail)
    assert not torch.equal(_sorted_rows(other), _sorted_rows(_batches_of(whole, 2, 7, 1, 10)[0]))


def test_epoch_orders_and_common_initial_models_do_not_depend_on_the_placement() -> None:
    ds = make_dataset(n_clients=5, sizes=(9, 14, 6, 11, 20))
    whole, part = build_federation(ds).with_streams(3), build_federation(ds, clients=[3, 4]).with_streams(3)
    order_w = whole.cohorts[0].epoch(4, whole.batch_streams).order
    order_p = part.cohorts[0].epoch(4, part.batch_streams).order
    for client in (3, 4):
        n = int(ds.clients[client].x_train.shape[0])
        torch.testing.assert_close(order_w[client, :n], order_p[int(part.position[client]), :n])
    common_w, common_p = (
        whole.cohorts[0].init_thetas(0, common=True),
        part.cohorts[0].init_thetas(0, common=True),
    )
    torch.testing.assert_close(common_w[3], common_p[0])  # seeded by client 0, held elsewhere
    assert len(part.dataset.clients[0].y_train) == 0 and len(part.dataset.clients[3].y_train) == 11  # no copy
    assert part.steps_per_epoch(4) == whole.steps_per_epoch(4) == 5  # the largest client (20) is held
    assert build_federation(ds, clients=[0, 2]).steps_per_epoch(4) == 5  # ... also when held elsewhere


@pytest.mark.parametrize("shared", [False, True])
def test_a_half_edges_map_does_not_depend_on_the_buckets(shared: bool) -> None:
    """Two layouts that bucket (and order) the half-edges differently draw the same map per half-edge."""
    graph = make_graph("erdos-renyi", 8, p=0.5, seed=1)
    dims = [6, 6, 9, 6, 9, 6, 6, 9]
    coh_a = [0, 0, 1, 0, 1, 0, 0, 1]
    coh_b = [1, 1, 0, 2, 0, 1, 2, 0]  # other cohorts: other buckets and buffer order
    per_edge = []
    for coh in (coh_a, coh_b):
        layout = build_layout(graph, dims, coh, 0.5)
        maps = init_maps(layout, "gaussian", seed=11, shared=shared)
        per_edge.append(
            {
                int(h): m[k]
                for b, m in zip(layout.buckets, maps, strict=True)
                for k, h in enumerate(b.half_edges)
            }
        )
    assert per_edge[0].keys() == per_edge[1].keys()
    for h, m in per_edge[0].items():
        torch.testing.assert_close(m, per_edge[1][h], rtol=0, atol=0)
    h = 0  # edge 0: its two half-edges 0 and 1
    same_size = dims[graph.src[h]] == dims[graph.dst[h]]
    assert torch.equal(per_edge[0][0], per_edge[0][1]) == (shared and same_size)


def test_random_state_round_trips_and_continues_the_same_batches() -> None:
    # local_steps mode: each step samples from the federation's streams (epochs also walk a plan)
    cfg = RunConfig(algorithm="local", clients=4, rounds=3, batch_size=5, local_epochs=0)
    sim = build_simulation(cfg, fed=build_federation(make_dataset(n_clients=4, sizes=(20, 30, 12, 25))))
    sim.step()
    saved = sim.ctx.fed.random_state()
    after = [sim.ctx.next_batches()[0].x.clone() for _ in range(2)]
    sim.ctx.fed.load_random_state(saved)
    again = [sim.ctx.next_batches()[0].x.clone() for _ in range(2)]
    for x, y in zip(after, again, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    with pytest.raises(ValueError, match="client"):
        sim.ctx.fed.load_random_state({"batch": {0: saved["batch"][0]}})


def test_stream_seeds_are_distinct_and_deterministic() -> None:
    seeds = {stream_seed(s, k, i) for s in range(3) for k in (2, 3) for i in range(50)}
    assert len(seeds) == 300 and all(0 <= x < 2**63 for x in seeds)
    a, b = ClientStreams(0, [5]), ClientStreams(0, [5])
    assert torch.equal(a.keys([5], [4])[0], b.keys([5], [4])[0])


@pytest.mark.parametrize("init", ["gaussian", "uniform", "orthogonal", "identity-noise"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_maps_drawn_in_place_on_threads_equal_one_draw_per_stream(init: str, dtype: torch.dtype) -> None:
    """init_maps fills the buckets in place, several maps at once: each map must still be exactly
    the oracle draw from its own stream, ``(seed, MAP, h)`` (torch.randn / torch.rand written out)."""
    graph = make_graph("erdos-renyi", 9, p=0.5, seed=2)
    dims = [12, 20, 12, 20, 12, 20, 12, 20, 12]
    layout = build_layout(graph, dims, [d // 20 for d in dims], 0.5)
    maps = init_maps(layout, init, seed=5, dtype=dtype)
    for b, m in zip(layout.buckets, maps, strict=True):
        scale = default_scale(init, b.node_dim)
        for k, h in enumerate(b.half_edges.tolist()):
            gen, shape = stream(5, MAP, h), (b.edge_dim, b.node_dim)
            if init == "gaussian":
                want = torch.randn(shape, generator=gen) * scale
            elif init == "uniform":
                want = (torch.rand(shape, generator=gen) * 2 - 1) * scale
            elif init == "orthogonal":
                want = torch.linalg.qr(torch.randn(shape[::-1], generator=gen))[0].T * scale
            else:
                want = torch.eye(*shape) + torch.randn(shape, generator=gen) * scale
            assert torch.equal(m[k], want.to(dtype)), (b.edge_dim, b.node_dim, h)
