"""Partial personalisation over a graph, DFedAlt's round: Shi et al., "Towards More Suitable
Personalization in Federated Learning via Decentralized Partial Model Training" (arXiv 2305.15157,
2023); the alternating local update is FedAlt's (Pillutla et al., "Federated Learning with Partial
Model Personalization", ICML 2022).

Each client's model ``theta_i = (u_i, v_i)`` is split into a shared body ``u_i`` and a personal
head ``v_i``, the parameters of the model's last ``personal_layers`` layers (modules that own
parameters, in the model's parameter order: with 1, the last ``nn.Linear``'s weight and bias). Round:
1. personal part: ``v_i <- v_i - alpha grad_v f_i(u_i, v_i)`` for ``local_steps`` steps (or
   ``local_epochs`` passes over the client's data), the body fixed;
2. shared part: ``u_i <- u_i - alpha grad_u f_i(u_i, v_i)`` for as many steps, the new head fixed;
3. gossip: ``u_i <- w_ii u_i + sum_j w_ij u_j`` with D-PSGD's Metropolis-Hastings weights
   ``w_ij = 1 / (1 + max(deg_i, deg_j))`` (:mod:`.dpsgd`); the head is never sent.
A round takes twice the local gradients of ``local`` (each step's gradient is the whole model's; a
part's step uses its coordinates), all counted in ``flops_local``. Every client sends its body
(``d_u`` floats) to each neighbour: the bits are those of the body alone. ``thetas``: the whole
personalised models ``(u_i, v_i)``. No coupling term: ``penalty`` is ``None``.

Missing neighbours (``drop_prob``, ``link_drop_prob``, rejected messages): the mixing renormalised
over the neighbours heard, as D-PSGD; a client that sits a round out keeps its model. A model with
a single layer (``logistic``, ``linear``) would have no body: refused, naming ``personal_layers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...component_keys import Keys, key
from ...config import ConfigError, RunConfig
from ...federation import Cohort
from ...messages import Payload
from ..gossip.dpsgd import metropolis_weights, mix, mixing_flops, mixing_tensors, warn_weighted
from ..gossip.payload import GossipState, ModelGossip
from ..protocol.algorithm import Algorithm, Context, register
from ..training.steps import gradient, require_single_cohort


def personal_coordinates(cohort: Cohort, layers: int) -> np.ndarray:
    """``[d]`` bool: the coordinates of the cohort's model that belong to its last ``layers`` layers
    (a layer: the module that owns a parameter; layers in the order of their first parameter);
    :class:`ConfigError` when that leaves no layer to share."""
    owners = [name.rpartition(".")[0] for name in cohort.names]
    order = list(dict.fromkeys(owners))
    if layers >= len(order):
        kind = "only one layer" if len(order) == 1 else f"{len(order)} layers"
        raise ConfigError(
            f"config key 'personal_layers' = {layers} leaves algorithm=partial nothing to share: model "
            f"{cohort.model_name!r} has {kind} with parameters ({', '.join(cohort.names)}), and "
            f"personal_layers must stay below its layer count ({len(order)}) so that a body is gossiped; "
            "choose a model with more layers (e.g. model=cnn on images, or your own module:function), a "
            "smaller personal_layers, or algorithm=local to share nothing"
        )
    personal = set(order[len(order) - layers :])
    return np.repeat(np.array([o in personal for o in owners]), cohort.numels)


@dataclass
class PartialState(GossipState):
    """:class:`.gossip.GossipState` (``outgoing``: the bodies sent ``[N, d_u]``; ``mixing``: the
    Metropolis-Hastings weights) and the body's size ``d_u``, the coordinates D-PSGD's mixing
    combines (``metrics/flops.py`` counts the mixing of these alone)."""

    mixed_dim: int | None = None


@dataclass(frozen=True)
class PartialKeys(Keys):
    """Partial personalisation: the personal layers."""

    personal_layers: int = key(
        1,
        "`partial`: how many of the model's last layers (modules with parameters, e.g. the last "
        "`nn.Linear`'s weight and bias) stay personal and are never sent; the layers before them are "
        "gossiped. At least one layer must be shared: a one-layer model (`logistic`, `linear`) is refused.",
        rule="personal_layers >= 1",
    )


@register("partial", display="DFedAlt (partial)", keys=(PartialKeys,), aggregation=mixing_flops)
class Partial(Algorithm[PartialState]):
    name = "partial"

    def __init__(self, config: RunConfig) -> None:
        self.alpha = config.alpha
        self.layers = config.personal_layers
        self.body = torch.zeros(0, dtype=torch.long)  # [d_u] the body's coordinates (set by init)
        self.parts: list[torch.Tensor] = []  # [d] 0/1 masks: the head, then the body

    def init(self, ctx: Context) -> PartialState:
        require_single_cohort(ctx, self.name)
        cohort = ctx.fed.cohorts[0]
        personal = personal_coordinates(cohort, self.layers)
        thetas = ctx.init_thetas()
        ref = thetas[0]
        self.body = torch.as_tensor(np.flatnonzero(~personal), dtype=torch.long, device=ref.device)
        head = torch.as_tensor(personal, dtype=ref.dtype, device=ref.device)
        self.parts = [head, 1.0 - head]
        gossip = ModelGossip(ctx.graph, len(self.body), ref.device, cohort.clients)
        warn_weighted(ctx, self.name)
        state = PartialState(thetas=thetas, gossip=gossip, mixed_dim=len(self.body))
        state.mixing = mixing_tensors(gossip, *metropolis_weights(ctx.graph), ref)
        return state

    def local(self, state: PartialState, ctx: Context) -> PartialState:
        theta = state.thetas[0]
        for part in self.parts:  # the personal head, then the shared body (steps 1 and 2)
            for _ in range(ctx.local_steps()):
                theta = theta - self.alpha * (part * gradient(ctx, theta, state))
        state.thetas = [theta]
        state.outgoing = theta.index_select(1, self.body)
        return state

    def send(self, state: PartialState, phase: int, ctx: Context) -> Payload:
        assert state.gossip is not None and state.outgoing is not None
        return {"model": state.gossip.send(state.outgoing)}

    def receive(self, state: PartialState, incoming: Payload, phase: int, ctx: Context) -> PartialState:
        gossip, own, mixing = state.gossip, state.outgoing, state.mixing
        assert gossip is not None and own is not None and mixing is not None
        mixed = mix(gossip, own, mixing, incoming["model"])
        state.thetas = [state.thetas[0].index_copy(1, self.body, mixed)]
        return state
