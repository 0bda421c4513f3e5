"""The bench's generated data and simulations: a :class:`~.settings.Setting` made concrete."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..data.base import FederatedDataset, RawClient, RawFederated
from ..data.protocol import apply_protocol
from ..federation import build_federation
from ..reference.loop import sheaf_state
from ..runtime.engine.simulate import Simulation, build_simulation
from .settings import Setting


def make_dataset(s: Setting) -> FederatedDataset:
    """Gaussian features, labels from a random linear teacher per rotation-like group of clients,
    split by the paper's protocol (75/25, half of the clients keep 20% of their training data)."""
    rng = np.random.default_rng(s.seed)
    dim = math.prod(s.feature_shape)
    teachers = [rng.standard_normal((dim, s.classes)).astype(np.float32) for _ in range(4)]
    clients = []
    for i in range(s.clients):
        x = rng.standard_normal((s.samples, dim), dtype=np.float32)
        y = (x @ teachers[i % 4]).argmax(1).astype(np.int64)
        clients.append(RawClient(x.reshape(s.samples, *s.feature_shape), y))
    return apply_protocol(
        RawFederated(f"bench-{s.name}", "classification", s.classes, tuple(clients)), s.seed
    )


def build(s: Setting, device: str = "cpu") -> Simulation[Any]:
    """The Sheaf-FMTL simulation of setting ``s`` on ``device``, ready for ``sim.step()``."""
    cfg = s.config(device)
    fed = build_federation(make_dataset(s), s.model, l2=cfg.l2, device=device)
    return build_simulation(cfg, fed=fed)


def lower_bound_bytes(sim: Simulation[Any]) -> dict[str, int]:
    """What a run cannot do without: every map, every model, every client's data (unpadded)."""
    maps = sum(m.numel() * m.element_size() for m in sheaf_state(sim).maps)
    models = sum(t.numel() * t.element_size() for t in sim.state.thetas)
    data = sum(
        c.x_train.nbytes + c.y_train.nbytes + c.x_test.nbytes + c.y_test.nbytes
        for c in sim.ctx.fed.dataset.clients
    )
    return {"maps": maps, "models": models, "data": data, "total": maps + models + data}
