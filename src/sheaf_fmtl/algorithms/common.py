"""Pieces the baselines share: the one-model check, fixed mini-batches, whole models gossiped along
half-edges (D-PSGD, dFedU) and the round of a star with a parameter server (FedAvg, Ditto, pFedMe,
Per-FedAvg).

The baselines compare clients' models coordinate by coordinate, so every client must have the same
model (the federation has one cohort); Sheaf-FMTL and local training have no such restriction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config import ConfigError, RunConfig
from ..runtime.edges import EdgeLayout
from ..runtime.transport import EdgeTensor, Payload, ServerTensor
from ..sheaf.graph import ClientGraph
from .base import Context, State


def require_single_cohort(ctx: Context, name: str) -> None:
    """Raise unless all clients share one architecture (one ``[N, d]`` stack in client order)."""
    fed = ctx.fed
    if len(fed.cohorts) != 1:
        dims = sorted({c.dim for c in fed.cohorts})
        raise ValueError(
            f"algorithm {name!r} needs every client to have the same model, but this federation has "
            f"{len(fed.cohorts)} model groups (parameter counts {dims}); use sheaf-fmtl or local for "
            "heterogeneous models, or a dataset where all clients share the input shape (e.g. synthetic)"
        )
    if not np.array_equal(fed.position, np.arange(fed.num_clients)):  # pragma: no cover - by construction
        raise ValueError("single-cohort federation must stack clients in client order")


def gradient(ctx: Context, theta: torch.Tensor, state: State) -> torch.Tensor:
    """Fresh mini-batch gradient ``[N, d]`` of a one-cohort stack; records the batch losses."""
    grads, state.batch_loss = ctx.stochastic_gradients([theta])
    return grads[0]


def require_stable_coupling(
    alpha: float, lam: float, lambda_max: float, operator: str, maps: bool = True
) -> str | None:
    """Refuse ``alpha lam lambda_max >= 2`` (the coupling step ``theta <- theta - alpha lam L theta``
    then grows along the top eigenvector); a note when ``>= 1`` (``lambda_max`` is estimated from
    below, so the margin may be smaller than it looks)."""
    product = alpha * lam * lambda_max
    keys = "lower alpha or lam"
    if maps:
        keys += ", or scale the maps down (map_scale; the default scales them by 1/sqrt(d_i))"
    if product >= 2.0:
        raise ConfigError(
            f"unstable configuration: alpha*lam*lambda_max = {alpha:g}*{lam:g}*{lambda_max:.4g} = "
            f"{product:.3g} >= 2 ({operator}), so the coupling step diverges; {keys}; "
            "stability_check=false skips this check"
        )
    if product >= 1.0:
        return (
            f"alpha*lam*lambda_max = {product:.3g} is close to the stability limit 2 ({operator}, "
            f"lambda_max estimated {lambda_max:.4g}); if the run diverges, {keys}"
        )
    return None


def coupling_energy(diff: torch.Tensor, lam: float) -> tuple[float, float]:
    """``(lam/2 sum ||diff||^2, sum ||diff||^2)`` over the rows of ``diff``."""
    e = float((diff.double() ** 2).sum())
    return 0.5 * lam * e, e


# --------------------------------------------------------------------------- decentralized gossip


class ModelGossip:
    """Whole models along half-edges: buffer position ``q`` is graph half-edge ``q`` (``src[q] ->
    dst[q]``) and carries ``theta_{src[q]}`` (``d`` floats); what arrives at ``q`` is ``theta_{dst[q]}``."""

    def __init__(self, graph: ClientGraph, dim: int, device: torch.device | str = "cpu") -> None:
        self.num_nodes = graph.num_nodes
        self.dim = dim
        self.layout = EdgeLayout(np.full(graph.num_half_edges, dim, np.int64), graph.rev.copy())
        self.src = torch.as_tensor(graph.src, dtype=torch.long, device=device)
        self.edges = torch.as_tensor(graph.edges, dtype=torch.long, device=device).reshape(-1, 2)

    def send(self, theta: torch.Tensor) -> EdgeTensor:
        """``theta [N, d]`` -> one copy per outgoing half-edge."""
        return EdgeTensor(theta[self.src].reshape(-1), self.layout)

    def received(self, incoming: EdgeTensor | ServerTensor) -> torch.Tensor:
        """``[H, d]``: row ``q`` is the neighbour's model ``theta_{dst[q]}``."""
        return incoming.data.view(-1, self.dim)

    def neighbour_sum(self, per_half_edge: torch.Tensor) -> torch.Tensor:
        """``[H, d] -> [N, d]``: ``out_i = sum_{q: src[q] = i} v_q``."""
        out = per_half_edge.new_zeros((self.num_nodes, self.dim))
        return out.index_add_(0, self.src, per_half_edge)

    def edge_differences(self, theta: torch.Tensor) -> torch.Tensor:
        """``[E, d]``: ``theta_i - theta_j`` per undirected edge ``{i, j}`` (for the penalty only)."""
        return theta[self.edges[:, 0]] - theta[self.edges[:, 1]]


@dataclass
class GossipState(State):
    gossip: ModelGossip | None = None
    grads: torch.Tensor | None = None  # [N, d] gradients taken in ``local``
    outgoing: torch.Tensor | None = None  # [N, d] the models sent this round
    mixing: tuple[torch.Tensor, torch.Tensor] | None = None  # D-PSGD: (w per half-edge [H, 1], w_ii [N, 1])


def gossip_init(ctx: Context, name: str) -> GossipState:
    require_single_cohort(ctx, name)
    thetas = ctx.init_thetas()
    return GossipState(thetas=thetas, gossip=ModelGossip(ctx.graph, thetas[0].shape[1], thetas[0].device))


# --------------------------------------------------------------------------- star with a server


@dataclass
class ServerState(State):
    """``thetas[0]``: what is evaluated (see each algorithm); ``glob [N, d]``: each client's copy of
    the global model, which is what the clients uplink; ``anchor``: the global model at round start."""

    glob: torch.Tensor | None = None
    anchor: torch.Tensor | None = None


class ServerAlgorithm:
    """A round over a star with a parameter server (not a client): ``local_update`` (subclasses) ->
    uplink ``glob`` rows -> the server's weighted average -> downlink -> ``after_average``.

    Aggregation weights: sample counts ``n_i`` (``uniform = False``) or equal (``uniform = True``).
    The global model starts from client 0's initial model, shared by every client.
    """

    name: str
    uniform: bool = False

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.alpha = config.alpha
        self.lam = config.lam

    def init(self, ctx: Context) -> ServerState:
        require_single_cohort(ctx, self.name)
        w0 = ctx.init_thetas()[0]
        glob = w0[:1].expand_as(w0).clone()
        return ServerState(thetas=[glob.clone()], glob=glob, anchor=glob.clone())

    def local(self, state: ServerState, ctx: Context) -> ServerState:  # type: ignore[override]
        assert state.glob is not None
        state.anchor = state.glob.clone()
        return self.local_update(state, ctx)

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        raise NotImplementedError

    def phases(self, state: State) -> int:
        return 1

    def weights(self, ctx: Context) -> torch.Tensor:
        n = ctx.fed.cohorts[0].n_train.to(torch.float32)
        return torch.ones_like(n) if self.uniform else n

    def send(self, state: ServerState, phase: int, ctx: Context) -> Payload:  # type: ignore[override]
        assert state.glob is not None
        return {"model": ServerTensor(state.glob, self.weights(ctx))}

    def receive(self, state: ServerState, incoming: Payload, phase: int, ctx: Context) -> ServerState:  # type: ignore[override]
        return self.after_average(state, incoming["model"].data.clone(), ctx)

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        """``avg [N, d]``: the server's average as every client received it."""
        state.glob = avg
        return state

    def penalty(self, state: State, ctx: Context) -> tuple[float, float] | None:
        return None

    def checkpoint(self, state: ServerState, ctx: Context) -> dict[str, Any]:  # type: ignore[override]
        assert state.glob is not None
        return {"global_model": state.glob[0].cpu()}


def sgd_steps(ctx: Context, state: State, theta: torch.Tensor, steps: int, alpha: float) -> torch.Tensor:
    """``steps`` plain local SGD steps ``theta <- theta - alpha g(theta)`` from fresh mini-batches."""
    for _ in range(steps):
        theta = theta - alpha * gradient(ctx, theta, state)
    return theta
