"""Hostile user objects through the Python API, each refused before training in one line naming
the key, client or graph: frozen or twice-registered parameters, losses that carry no gradient, a
model whose output is NaN, directed or multi graphs, non-integer node ids, string weights, an
adjacency matrix, non-numeric features; and clients without a test split counted honestly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
import torch
from torch import nn

import sheaf_fmtl
from sheaf_fmtl.metrics.results import format_summary

from .test_user_models import SMALL, tabular


def _frozen() -> nn.Module:
    m = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    m[0].weight.requires_grad_(False)
    return m


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(5, 3)
        self.b = self.a  # the same layer under a second name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(x)


class _NaN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * float("nan")


def _digraph() -> nx.DiGraph:
    return nx.DiGraph([(0, 1), (1, 2), (2, 3)])


def _both_ways() -> nx.DiGraph:
    return nx.DiGraph([(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)])


def _multigraph() -> nx.MultiGraph:
    return nx.MultiGraph([(0, 1), (0, 1), (1, 2), (2, 3)])


def _string_weight() -> nx.Graph:
    g = nx.path_graph(4)
    g[1][2]["weight"] = "heavy"
    return g


def _float_nodes() -> nx.Graph:
    return nx.Graph([(0, 1), (1, 2.5), (2.5, 3)])


def _objects() -> list[Any]:
    data = tabular()
    x, y, xt, yt = data[2]
    data[2] = (np.array([["a"] * 5] * len(x), dtype=object), y, xt, yt)
    return data


def _no_tests() -> list[Any]:
    return [(x, y, x[:0], y[:0]) for x, y, _, _ in tabular()]


CE = nn.functional.cross_entropy
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "frozen parameters": ({"model": _frozen}, "has frozen parameters (requires_grad=False: 0.weight)"),
    "submodule registered twice": (
        {"model": _Twice},
        "holds one parameter under two names (a.weight and b.weight",
    ),
    "loss returns a python float": ({"loss": lambda o, t: float(CE(o, t).detach())}, "returned a float"),
    "loss returns a detached tensor": ({"loss": lambda o, t: CE(o, t).detach()}, "detached from the outputs"),
    "loss returns an integer tensor": (
        {"loss": lambda o, t: (o.argmax(1) != t).sum()},
        "returned a torch.int64 tensor",
    ),
    "model outputs NaN": ({"model": _NaN}, "outputs NaN or infinite values on its first 2 samples"),
    "directed graph": ({"graph": _digraph()}, "graph: a directed DiGraph"),
    "directed graph, both directions": ({"graph": _both_ways()}, "graph: a directed DiGraph"),
    "multigraph": ({"graph": _multigraph()}, "graph: a MultiGraph (parallel edges)"),
    "non-integer node id in an edge list": (
        {"graph": [(0, 1), (1, 2.5), (2, 3)]},
        "graph: edge 1 (1, 2.5) has node id 2.5; node ids must be integers",
    ),
    "non-integer node of a networkx graph": ({"graph": _float_nodes()}, "has node id 2.5"),
    "string weight in an edge list": (
        {"graph": [(0, 1, 1.0), (1, 2, "x"), (2, 3, 2.0)]},
        "graph: edge 1 (1, 2, 'x') has weight 'x' (str); expected a positive number",
    ),
    "string weight of a networkx graph": (
        {"graph": _string_weight()},
        "graph: edge (1, 2) has weight 'heavy'",
    ),
    "adjacency matrix": (
        {"graph": nx.to_numpy_array(nx.path_graph(4))},
        "graph: a 4 x 4 symmetric array with zero diagonal, an adjacency matrix",
    ),
    "repeated edge": ({"graph": [(0, 1), (1, 0), (1, 2), (2, 3)]}, "graph: repeated edges"),
    "object-dtype features": ({"data": _objects()}, "data of client 2: training features of type object"),
    "no client has test samples": ({"data": _no_tests()}, "no client has test samples"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_hostile_object_is_refused_before_training_in_one_line(tmp_path: Path, case: str) -> None:
    keys, fragment = BAD[case]
    with pytest.raises(ValueError) as e:
        sheaf_fmtl.run(**{"data": tabular(), **keys}, out=tmp_path / "run", **SMALL)
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "run").exists()


def test_integral_floats_and_numpy_ids_are_node_ids() -> None:
    """What the refusals leave alone: ``(1.0, 2.0)`` and numpy integers are ids, as before."""
    graph = np.array([[0, 1, 1.0], [1, 2, 2.0], [2, 3, 0.5]])  # a weighted edge list as a float array
    result = sheaf_fmtl.run(data=tabular(), graph=graph, **SMALL)
    assert result.summary["rounds"] == SMALL["rounds"]


def test_a_client_without_test_samples_is_counted_honestly() -> None:
    data = tabular()
    x, y, _, _ = data[1]
    data[1] = (x, y, x[:0], y[:0])
    with pytest.warns(
        UserWarning,
        match=r"data of client 1: no test samples, left out of the mean test metric \(over 3 of 4 clients\)",
    ):
        result = sheaf_fmtl.run(data=data, **SMALL)
    per = result.summary["per_client"]
    assert per[1] is None and result.final == pytest.approx(np.mean([v for v in per if v is not None]))
    assert "over 3 of 4 clients" in format_summary(result.summary, None)
    full = sheaf_fmtl.run(data=tabular(), **SMALL)
    assert "over 4 clients" in format_summary(full.summary, None)
