"""What the ranks of a run agree after each round, carried on the all-reduce of the engine's
divergence check (:meth:`Simulation.finite_and_max`): a pending signal, so that every rank stops
after the same round, and whether any rank's checkpoint write is in flight, so that every rank
completes a checkpoint only once all shards are written. In one process nothing is exchanged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...engine.simulate import Simulation
from ...engine.transport import InProcessTransport
from .interrupt import adopt, signalled


@dataclass(eq=False)
class RoundAgreement:
    """The run-side state of one simulation's rounds across processes (held by the round loop;
    :mod:`..launching.launch` hands :meth:`agree_stop` to :mod:`.interrupt`)."""

    sim: Simulation[Any]
    # Whether this rank's checkpoint write is in flight (set by the round loop).
    writing: Callable[[], bool] | None = None
    stop_agreed: tuple[int, int] | None = None  # (round, signal or 0) agreed across processes
    # The last round after which no rank's write was in flight (every rank may then complete it).
    settled_round: int = -1

    def finite(self) -> bool:
        """The engine's divergence check (:meth:`Simulation.finite`); across processes its one
        all-reduce also carries this rank's pending signal, read by :meth:`agree_stop`, and
        whether its checkpoint write is in flight, :attr:`writing`."""
        sim = self.sim
        if isinstance(sim.transport, InProcessTransport):
            return sim.finite()
        busy = int(self.writing()) if self.writing is not None else 0
        ok, (signum, busy_anywhere) = sim.finite_and_max([signalled(), busy])
        round_ = sim.transport.faults.round
        self.stop_agreed = (round_, signum)
        if not busy_anywhere:
            self.settled_round = round_
        return ok

    def agree_stop(self, local: bool) -> bool:
        """Across processes: whether the group stops after this round: a signal on any rank, as
        gathered by this round's :meth:`finite` (else one all-reduce); a rank that got none adopts
        it (:func:`.interrupt.adopt`), so every rank records the same stop."""
        sim = self.sim
        if self.stop_agreed is None or self.stop_agreed[0] != sim.transport.faults.round:
            got = sim.ctx.comm.all_max(torch.tensor(signalled(), dtype=torch.int32))
            self.stop_agreed = (sim.transport.faults.round, int(got))
        signum = self.stop_agreed[1]
        if signum:
            adopt(signum)
        return signum > 0
