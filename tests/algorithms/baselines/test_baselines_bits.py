"""Transmitted bits per round against the closed forms of the paper's cost table (float32 = 32 bits),
and the server payload of the transport."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sheaf_fmtl.messages import EdgeLayout, EdgeTensor, ServerTensor
from sheaf_fmtl.runtime.engine.transport import InProcessTransport
from sheaf_fmtl.sheaf.stalks import edge_dim
from tests._baselines_problems import (
    complete_graph,
    federation,
    path_graph,
    regression_dataset,
    simulation,
)

ROUNDS = 3
FLOAT = 32


def _bits_per_round(sim) -> float:  # noqa: ANN001
    before = sim.transport.bits
    for _ in range(ROUNDS):
        sim.step()
    return (sim.transport.bits - before) / ROUNDS


@pytest.mark.parametrize("eta, messages", [(0.01, 2), (0.0, 1)])
def test_sheaf_literal_bits_are_sum_of_edge_stalks(eta: float, messages: int) -> None:
    """Per client and message ``sum_{j in N_i} d_ij`` floats; two messages per round when eta > 0."""
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9), features=(3, 5, 4, 6)))  # d_i = 4, 6, 5, 7
    graph = complete_graph(4)
    gamma = 0.5
    sim = simulation("sheaf-fmtl", fed, graph, gamma=gamma, eta=eta, message_mode="literal")
    d = fed.node_dims()
    per_client = [sum(edge_dim(gamma, int(d[i]), int(d[j])) for j in graph.neighbors(i)) for i in range(4)]
    assert per_client == [2 + 2 + 2, 2 + 2 + 3, 2 + 2 + 2, 2 + 3 + 2]
    assert _bits_per_round(sim) == messages * FLOAT * sum(per_client)


@pytest.mark.parametrize("algorithm", ["dfedu", "dpsgd"])
def test_model_gossip_bits_are_sum_of_neighbour_models(algorithm: str) -> None:
    """dFedU / D-PSGD: client i sends its whole model to each neighbour: ``sum_{j in N_i} d_j``."""
    fed = federation(regression_dataset(sizes=(6, 7, 8, 9, 5)))
    graph = path_graph(5)
    sim = simulation(algorithm, fed, graph)
    d = fed.cohorts[0].dim
    assert _bits_per_round(sim) == FLOAT * sum(d * len(graph.neighbors(i)) for i in range(5))


@pytest.mark.parametrize("algorithm", ["fedavg", "ditto", "pfedme", "perfedavg"])
def test_server_bits_are_uplink_plus_downlink(algorithm: str) -> None:
    """Star with a server: ``d`` floats up and ``d`` floats down per client and round."""
    fed = federation()
    sim = simulation(algorithm, fed)
    d, n = fed.cohorts[0].dim, fed.num_clients
    assert _bits_per_round(sim) == FLOAT * 2 * n * d
    assert sim.transport.uplink_bits == sim.transport.downlink_bits == ROUNDS * FLOAT * n * d


def test_local_sends_nothing() -> None:
    assert _bits_per_round(simulation("local")) == 0


def test_server_tensor_weighted_average_and_bits() -> None:
    t = InProcessTransport()
    data = torch.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, 10.0]])
    out = t.exchange({"m": ServerTensor(data, torch.tensor([1.0, 1.0, 2.0]))})["m"]
    assert isinstance(out, ServerTensor)
    torch.testing.assert_close(out.data, torch.tensor([[3.5, 7.0]] * 3))
    assert (t.uplink_bits, t.downlink_bits, t.bits) == (3 * 2 * 32, 3 * 2 * 32, 2 * 3 * 2 * 32)
    layout = EdgeLayout(np.array([2, 2]), np.array([1, 0]))
    edge = t.exchange({"e": EdgeTensor(torch.arange(4.0), layout)})["e"]
    torch.testing.assert_close(edge.data, torch.tensor([2.0, 3.0, 0.0, 1.0]))
    assert t.bits == 2 * 3 * 2 * 32 + 4 * 32


@pytest.mark.parametrize("weights", [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [1.0, 1.0]])
def test_server_tensor_rejects_bad_weights(weights: list[float]) -> None:
    with pytest.raises(ValueError, match="weights"):
        InProcessTransport().exchange({"m": ServerTensor(torch.ones(3, 2), torch.tensor(weights))})
