"""Edge messages (:mod:`sheaf_fmtl.messages`) through the in-process transport: each half-edge's
payload reaches its reverse, and the bits counted are those of the payload's dtype."""

from __future__ import annotations

import numpy as np

from sheaf_fmtl.messages import EdgeLayout, EdgeTensor
from sheaf_fmtl.runtime.engine.transport import InProcessTransport


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
