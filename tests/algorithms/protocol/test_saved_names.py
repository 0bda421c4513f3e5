"""State fields renamed since a checkpoint was saved: the earlier name is still read."""

from __future__ import annotations

import torch

from sheaf_fmtl.algorithms.baselines.server import ServerState
from sheaf_fmtl.algorithms.maps.learned_state import SheafState


def test_a_checkpoint_saved_under_the_earlier_names_restores() -> None:
    copies = torch.arange(6.0).reshape(3, 2)
    state = ServerState(thetas=[torch.zeros(3, 2)])
    state.restore({"thetas": [copies.clone()], "glob": copies}, "cpu")
    torch.testing.assert_close(state.global_copies, copies)
    assert "global_copies" in state.checkpoint() and "glob" not in state.checkpoint()
    sheaf = SheafState(thetas=[torch.zeros(3, 2)])
    super(SheafState, sheaf).restore({"greet": False}, "cpu")
    assert sheaf.opens_with_messages is False
