"""The data protocol on small inputs: the train/test split, the reduced clients, standardisation
with training statistics, determinism under the seed."""

from __future__ import annotations

import numpy as np

from sheaf_fmtl.data.base import RawClient, RawFederated
from sheaf_fmtl.data.protocol import apply_protocol, reduced_clients


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
