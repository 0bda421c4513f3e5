"""Graphs, config loading and the data protocol on small inputs."""

from __future__ import annotations

import numpy as np
import pytest

from sheaf_fmtl.config import ConfigError, load_config
from sheaf_fmtl.data.base import RawClient, RawFederated
from sheaf_fmtl.data.protocol import apply_protocol, reduced_clients
from sheaf_fmtl.messages import EdgeLayout, EdgeTensor
from sheaf_fmtl.runtime.engine.transport import InProcessTransport
from sheaf_fmtl.sheaf.graph import GraphError, make_graph
from sheaf_fmtl.sheaf.stalks import edge_dim


@pytest.mark.parametrize("kind", ["erdos-renyi", "watts-strogatz", "barabasi-albert", "complete", "star"])
def test_graphs_are_connected_seeded_and_have_consistent_half_edges(kind):
    a = make_graph(kind, 15, p=0.2, k=4, m=2, seed=5)
    b = make_graph(kind, 15, p=0.2, k=4, m=2, seed=5)
    assert a.is_connected() and np.array_equal(a.edges, b.edges)
    assert np.array_equal(a.src[a.rev], a.dst) and np.array_equal(a.rev[a.rev], np.arange(a.num_half_edges))
    assert (a.edges[:, 0] < a.edges[:, 1]).all()


def test_erdos_renyi_differs_between_seeds_and_redraws_when_disconnected():
    assert not np.array_equal(
        make_graph("erdos-renyi", 20, p=0.3, seed=1).edges, make_graph("erdos-renyi", 20, p=0.3, seed=2).edges
    )
    g = make_graph("erdos-renyi", 20, p=0.12, seed=0)  # often disconnected on a first draw
    assert g.is_connected()
    with pytest.raises(GraphError, match="disconnected in all"):
        make_graph("erdos-renyi", 30, p=0.01, seed=0, max_tries=5)


def test_edge_list_file(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("# ring\n0 1\n1 2\n2 3\n3 0\n")
    g = make_graph("file", 4, path=f)
    assert g.num_edges == 4 and g.neighbors(0) == [1, 3]
    f.write_text("0 1\n2 3\n")
    with pytest.raises(GraphError, match="not connected"):
        make_graph("file", 4, path=f)
    f.write_text("0 9\n")
    with pytest.raises(GraphError, match="node ids"):
        make_graph("file", 4, path=f)


def test_edge_dim_rule():
    assert edge_dim(0.29, 100, 200) == 29
    assert edge_dim(0.01, 50, 70) == 1  # at least 1
    assert edge_dim(1.0, 7, 5) == 5


def test_config_file_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lam: 0.5\ndata:\n  relatedness: 0.2\n")
    c = load_config(f, ["data.groups=2", "rounds=3"])
    assert c.lam == 0.5 and c.rounds == 3 and c.data == {"relatedness": 0.2, "groups": 2}
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_protocol_split_reduction_and_determinism():
    rng = np.random.default_rng(0)
    clients = tuple(RawClient(rng.normal(size=(200, 3)) * 5 + 2, rng.integers(0, 4, 200)) for _ in range(10))
    raw = RawFederated("toy", "classification", 4, clients)
    a, b, c = apply_protocol(raw, 1), apply_protocol(raw, 1), apply_protocol(raw, 2)
    reduced = set(reduced_clients(10, 1))
    assert len(reduced) == 5
    for i, client in enumerate(a.clients):
        n_train = 200 - len(client.y_test) if i not in reduced else None
        assert abs(len(client.y_test) - 50) <= 4  # 25% per client, rounded per class (4 classes)
        if n_train is not None:
            assert len(client.y_train) == n_train
        else:  # 20% of the training part kept, rounded per class
            assert abs(len(client.y_train) - 0.2 * (200 - len(client.y_test))) <= 4
        assert set(np.unique(client.y_test)) == set(np.unique(clients[i].y))
        if i not in reduced:  # standardised with training statistics
            np.testing.assert_allclose(client.x_train.mean(0), 0, atol=1e-5)
            np.testing.assert_allclose(client.x_train.std(0), 1, atol=1e-4)
        np.testing.assert_array_equal(client.x_train, b.clients[i].x_train)
    assert any(not np.array_equal(x.y_train, y.y_train) for x, y in zip(a.clients, c.clients, strict=True))


def test_transport_counts_bits_of_real_payloads():
    layout = EdgeLayout(np.array([2, 2, 3, 3]), np.array([1, 0, 3, 2]))
    data = np.arange(10, dtype=np.float32)
    import torch

    t = InProcessTransport()
    got = t.exchange({"m": EdgeTensor(torch.as_tensor(data), layout)})["m"].data
    assert got.tolist() == [2, 3, 0, 1, 7, 8, 9, 4, 5, 6]
    assert t.bits == 10 * 32
    t.exchange({"m": EdgeTensor(torch.as_tensor(data).to(torch.bfloat16), layout)})
    assert t.bits == 10 * 32 + 10 * 16


def test_exponent_notation_is_read_as_a_number(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lam: 1e-3\n")
    assert load_config(f, ["alpha=2e-2"]).lam == 1e-3
    assert load_config(None, ["alpha=2e-2"]).alpha == 0.02
