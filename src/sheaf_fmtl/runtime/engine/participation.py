"""Client sampling (``clients_per_round``): the clients that take part in a round.

In round ``t`` the ``clients_per_round`` clients with the smallest draws ``U(seed, t, client)``
(:func:`sheaf_fmtl.streams.uniforms`, stream kind :data:`PARTICIPATION_DRAW`) take part, FedAvg's
fraction ``C`` of the ``K`` clients drawn without replacement; the draw derives from the seed, the
round and the global ids alone, so every process, and a resumed run, draws the same participants.
:class:`~.faults.Faults` treats a client left out as one that has not joined yet (``join_round``):
it sends nothing (no bits, no dropped message), trains nothing and keeps its state; the server
baselines train the participants alone (``algorithms/training/participants.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...config import ConfigError
from ...spelling import setting
from ...streams import uniforms

if TYPE_CHECKING:
    from ...config import RunConfig

PARTICIPATION_DRAW = 16  # stream kind (sheaf_fmtl.streams; 11-15: the drop plan's and the schedules')


@dataclass(frozen=True)
class Participation:
    """``per_round`` of ``clients`` clients take part in each round (see the module docstring)."""

    seed: int
    per_round: int
    clients: int

    @classmethod
    def from_config(cls, config: RunConfig, num_clients: int) -> Participation | None:
        """The config's sampling over ``num_clients`` clients (``None``: every client, every round);
        a count above the clients is refused in one line."""
        count = config.clients_per_round
        if count is None:
            return None
        if count > num_clients:
            raise ConfigError(
                f"config key 'clients_per_round' = {count} is more than the {num_clients} clients of this "
                f"run; allowed: 1 <= clients_per_round <= clients, e.g. "
                f"{setting('clients_per_round', max(1, num_clients // 10))} (null: every client)"
            )
        return None if count == num_clients else cls(config.seed, count, num_clients)

    def chosen(self, round_: int) -> np.ndarray:
        """The global ids of round ``round_``'s participants, ascending."""
        u = uniforms(self.seed, PARTICIPATION_DRAW, round_, np.arange(self.clients))
        return np.sort(np.argsort(u, kind="stable")[: self.per_round])

    def left_out(self, round_: int) -> np.ndarray:
        """``[clients]`` bool: the clients that sit round ``round_`` out."""
        out = np.ones(self.clients, bool)
        out[self.chosen(round_)] = False
        return out
