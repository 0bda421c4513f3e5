"""Initial models: each client's flat parameters drawn from its module's default initialiser (or a
user model's builder) under a seed of the run's seed, a stream and the client's id, so the same
draw whichever process holds the client."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def draw_initial(
    module: nn.Module, factory: Callable[[int], nn.Module] | None, clients: list[int], seed: int, stream: int
) -> torch.Tensor:
    """``[len(clients), d]`` flat initial models on the CPU, each from the module's default
    initialiser (or a user model's ``factory``) under a seed of ``(seed, stream, client)``: the same
    draw in whichever process holds the client."""
    module = copy.deepcopy(module).cpu()
    rows = []
    for client in clients:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(np.random.SeedSequence([seed, stream, client]).generate_state(1)[0]))
            if factory is not None:  # a user model: its own initialisation, under the seed
                module = factory(client)
            else:
                for m in module.modules():
                    reset = getattr(m, "reset_parameters", None)
                    if callable(reset):
                        reset()
            rows.append(torch.cat([p.detach().reshape(-1).float() for p in module.parameters()]))
        if len(rows[-1]) != len(rows[0]):
            raise ValueError(
                f"model of client {client}: {len(rows[-1])} parameters, {len(rows[0])} for client "
                f"{clients[0]}; the model factory must build the same architecture each time"
            )
    return torch.stack(rows)
