"""Sheaf-FMTL's state (:class:`SheafState`): thetas, the layout, the restriction maps with their
pending rank-one updates (:mod:`sheaf_fmtl.sheaf.deferred`), the messages in flight between the
phases of a round, and what Theorem 1's map-step check has seen; and its checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...messages import EdgeLayout
from ...sheaf.deferred import DeferredMaps
from ...sheaf.layout import SheafLayout
from ..protocol.algorithm import State
from ..protocol.snapshot import host_copy


@dataclass
class SheafState(State):
    """What a Sheaf-FMTL run carries from round to round (see the module docstring)."""

    layout: SheafLayout | None = None
    store: DeferredMaps | None = None  # the restriction maps (with pending rank-one updates)
    grads: list[torch.Tensor] | None = None
    own: torch.Tensor | None = None  # P_ij theta_i for the coming theta step (flat, per half-edge)
    theirs: torch.Tensor | None = None  # P_ji theta_j for the coming theta step, as received/rebuilt
    heard: torch.Tensor | None = None  # [sum d_ij] bool: which of ``theirs`` arrived (None: all)
    sent: torch.Tensor | None = None  # P_ij theta_i^new sent for the map step
    sent_sq: torch.Tensor | None = None  # ||theta_i^new||^2 per half-edge, sent with it (compact mode)
    scalars: EdgeLayout | None = None  # layout of one scalar per half-edge
    # this round starts by exchanging P_ij theta_i (its messages are not known yet)
    opens_with_messages: bool = True
    element_edge: torch.Tensor | None = None  # [sum d_ij] buffer position of each message element's half-edge
    weights: torch.Tensor | None = None  # [sum d_ij] a_ij of each message element's edge (weighted graphs)
    map_defer: int = -1
    lambda_max: float | None = None  # start-up estimate of lambda_max(L_F)
    theta_norm_max: float = 0.0  # largest ||theta_i|| seen at evaluations (Theorem 1's D)
    first_violation: torch.Tensor | None = None  # [round, ||theta||^2] where eta lam D^2 >= 2 first held
    rounds_sent: int = 0
    warned_map_step: bool = False  # Theorem 1's map-step warning was given
    saved_names: ClassVar[dict[str, str]] = {"greet": "opens_with_messages"}

    def checkpoint(self) -> dict[str, Any]:
        """The data fields and the map store: stacked maps with their pending rank-one factors,
        unfolded (folding now would change the rounding of the iterates that follow). The maps of
        buckets that defer their updates are the run's own tensors, not copies (they change only
        at a fold): a caller that reads them later sets ``store.before_write`` to wait for it."""
        s = self.store
        assert s is not None
        base = [p if u is not None else host_copy(p) for p, u in zip(s.base, s.u, strict=True)]
        store = {"base": base, "u": host_copy(s.u), "v": host_copy(s.v), "count": list(s.count)}
        fields = {k: v for k, v in super().checkpoint().items() if k != "weights"}  # init rebuilds them
        return {**fields, "store": store}

    def restore(self, saved: dict[str, Any], device: torch.device | str) -> None:
        saved = dict(saved)
        store = saved.pop("store")
        super().restore(saved, device)
        s = self.store
        assert s is not None
        for name in ("base", "u", "v"):
            for m, t in zip(getattr(s, name), store[name], strict=True):
                if m is not None:
                    m.copy_(t)
        s.count = list(store["count"])

    @property
    def maps(self) -> list[torch.Tensor]:
        """The stacked maps ``[H_b, d_e, d]`` per bucket, with every pending update folded in."""
        assert self.store is not None
        return self.store.materialize()

    @maps.setter
    def maps(self, maps: list[torch.Tensor]) -> None:
        self.store = DeferredMaps(maps, self.map_defer, self.thetas[0].dtype)
