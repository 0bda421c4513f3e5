"""The round of a star with a parameter server (FedAvg, Ditto, pFedMe, Per-FedAvg)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...config import RunConfig
from ...messages import Payload, ServerTensor
from ..protocol.algorithm import Algorithm, Context, State
from ..training.participants import on_participants
from ..training.steps import require_single_cohort


def server_flops(config: RunConfig, dim: int, clients: int, half_edges: int) -> int:
    """A round's model combinations at the server: the weighted mean of ``clients`` models."""
    return 2 * dim * clients


@dataclass
class ServerState(State):
    """``thetas[0]``: what is evaluated (see each algorithm); ``global_copies [N, d]``: each
    client's copy of the global model, which is what the clients uplink; ``anchor``: the global model
    at round start."""

    global_copies: torch.Tensor | None = None
    anchor: torch.Tensor | None = None
    client_rows: ClassVar[tuple[str, ...]] = ("thetas", "global_copies", "opt_rows", "opt_scalars", "opt_t")
    # Rows that follow the server under client sampling: a client not drawn for a round is not put
    # back to its own (runtime/engine/faults.py); it holds the server's model, which it starts from
    # when it is next drawn.
    server_rows: ClassVar[tuple[str, ...]] = ("global_copies",)
    saved_names: ClassVar[dict[str, str]] = {"glob": "global_copies"}


class ServerAlgorithm(Algorithm[ServerState]):
    """A round over a star with a parameter server (not a client): ``local_update`` (subclasses) ->
    uplink ``global_copies`` rows -> the server's weighted average -> downlink -> ``after_average``.

    Aggregation weights: sample counts ``n_i`` (``uniform = False``) or equal (``uniform = True``).
    The global model starts from client 0's initial model, shared by every client.

    Missing clients (``drop_prob``, ``link_drop_prob`` does not apply to the star, rejected rows):
    the server averages over the clients whose rows arrived and passed validation, its weights
    renormalised over them. A client that sits a round out sends nothing, receives nothing and keeps
    its models (``global_copies`` and ``thetas``) as they were. If no row is accepted, every client takes its
    own uplinked row as the average.

    Client sampling (``clients_per_round``): the clients not drawn for the round are absent as above
    (the average is over the participants, renormalised), and the local update runs on the
    participants alone (:func:`..training.participants.on_participants`), so a round costs in
    proportion to them.
    """

    uniform: bool = False

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.alpha = config.alpha
        self.lam = 0.0 if config.lam is None else config.lam  # null for those that do not read it

    def init(self, ctx: Context) -> ServerState:
        require_single_cohort(ctx, self.name)
        w0 = ctx.init_thetas()[0]
        if ctx.config.init != "common":  # client 0's own draw, wherever client 0 is held
            w0 = ctx.fed.architecture(0).initial_model(ctx.config.seed, common=False).to(w0).expand_as(w0)
        copies = w0[:1].expand_as(w0).clone()
        return ServerState(thetas=[copies.clone()], global_copies=copies, anchor=copies.clone())

    def local(self, state: ServerState, ctx: Context) -> ServerState:
        assert state.global_copies is not None
        # (sampled rounds: the copies are replaced, never written in place, so no [N, d] copy is made)
        state.anchor = state.global_copies if ctx.left_out is not None else state.global_copies.clone()
        # clients_per_round: the participants alone train (the others keep their rows)
        return on_participants(state, ctx, self.local_update, extra=("anchor", "local_rate"))

    def local_update(self, state: ServerState, ctx: Context) -> ServerState:
        raise NotImplementedError

    def weights(self, ctx: Context) -> torch.Tensor:
        n = ctx.fed.cohorts[0].n_train.to(torch.float32)
        return torch.ones_like(n) if self.uniform else n

    def send(self, state: ServerState, phase: int, ctx: Context) -> Payload:
        assert state.global_copies is not None
        return {"model": ServerTensor(state.global_copies, self.weights(ctx))}

    def receive(self, state: ServerState, incoming: Payload, phase: int, ctx: Context) -> ServerState:
        got = incoming["model"]
        assert isinstance(got, ServerTensor)
        if ctx.left_out is not None and got.average is not None and got.reached is not None:
            # client sampling: the server's model is every client's copy, the next participants' start
            rows = got.data
            if rows.device.type == "cpu" and bool(got.reached):  # (free to read on the CPU)
                return self.after_average(state, got.average.expand_as(rows), ctx)  # no [N, d] copy
            return self.after_average(
                state, torch.where(got.reached.to(rows.device), got.average.expand_as(rows), rows), ctx
            )
        return self.after_average(state, got.data.clone(), ctx)

    def after_average(self, state: ServerState, avg: torch.Tensor, ctx: Context) -> ServerState:
        """``avg [N, d]``: the server's average as every client received it."""
        state.global_copies = avg
        return state

    def checkpoint(self, state: ServerState, ctx: Context) -> dict[str, Any]:
        assert state.global_copies is not None
        return {"global_model": state.global_copies[0].cpu()}
