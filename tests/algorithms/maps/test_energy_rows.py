"""The sheaf energy of whole models summed row by row (a bucket's ``[r, d]`` block per chunk) equals
the element-by-element sum through an element-to-half-edge index, and a dense computation by hand."""

from __future__ import annotations

import numpy as np
import pytest

import sheaf_fmtl.algorithms.maps.coordinate_state as state_module
from sheaf_fmtl.config import RunConfig
from sheaf_fmtl.runtime.engine.simulate import build_simulation


def test_row_sums_equal_the_element_index_and_a_dense_sum(monkeypatch) -> None:
    sim = build_simulation(
        RunConfig(dataset="synthetic", clients=30, rounds=2, graph_degree=5, maps="redrawn")
    )
    sim.step()
    monkeypatch.setattr(state_module, "ENERGY_CHUNK", 2000)  # several chunks of edges
    rows = state_module.expected_energy(sim.state, sim.ctx.comm)
    original = state_module._squared_differences
    monkeypatch.setattr(
        state_module,
        "_squared_differences",
        lambda layout, mine, comm, blocks=None: original(layout, mine, comm),  # noqa: ARG005
    )
    elements = state_module.expected_energy(sim.state, sim.ctx.comm)
    assert rows == pytest.approx(elements, rel=1e-12)
    layout, theta = sim.state.layout, sim.state.thetas[0].double()
    graph = layout.graph
    a = graph.half_edge_weights()
    dense = 0.0
    for h in range(graph.num_half_edges):  # each edge from both ends, (d_e / m_e) ||theta_i - theta_j||^2
        i, j = int(graph.src[h]), int(graph.dst[h])
        k = int(np.flatnonzero(layout.order == h)[0])
        m, d = int(layout.messages.sizes[k]), theta.shape[1]
        dense += 0.5 * a[h] * (m / d) * float(((theta[i] - theta[j]) ** 2).sum())
    assert rows == pytest.approx(dense, rel=1e-6)  # (the library differences models in float32)
