"""A cohort's evaluation sums: the loss or the test score of every client over its samples, a block
of clients and a chunk of their samples at a time, so that evaluating many clients or large
datasets holds about :data:`EVAL_ELEMENTS` input elements and their activations at once."""

from __future__ import annotations

from typing import Protocol

import torch

from .ragged import Ragged

EVAL_CHUNK = 512  # samples per client per evaluation chunk
EVAL_ELEMENTS = 1 << 22  # input elements (clients x samples x features) an evaluation chunk gathers


class Scored(Protocol):
    """What the sums read of their :class:`~sheaf_fmtl.federation.Cohort`."""

    task: str

    def eval_block(self, width: int, extra: int = 0) -> int: ...

    def predict_rows(self, thetas: torch.Tensor, x: torch.Tensor, rows: slice) -> torch.Tensor: ...

    def _per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...


def chunked_sums(
    model: Scored, thetas: torch.Tensor, split: Ragged, score: str, idx: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client sums over the valid samples of ``split`` (``idx [C, k]``: of those at these
    positions; its counts ``n`` then ``min(n_i, k)``) of the loss or the test score, a block of
    clients and a chunk of their samples at a time (about :data:`EVAL_ELEMENTS` input
    elements), so that evaluating many clients or large datasets never holds every sample or
    activation at once."""
    clients = split.size
    n = split.n if idx is None else split.n.clamp(max=idx.shape[1])
    n_max = split.n_max if idx is None else idx.shape[1]
    valid = torch.arange(n_max, device=n.device) < n[:, None]
    total = thetas.new_zeros(clients)
    block = model.eval_block(min(EVAL_CHUNK, n_max))
    every = torch.arange(n_max, device=n.device)
    for c in range(0, clients, block):
        rows = slice(c, min(c + block, clients))
        at = torch.arange(rows.start, rows.stop, device=n.device)
        for s in range(0, n_max, EVAL_CHUNK):
            pos = (
                every[s : s + EVAL_CHUNK].expand(len(at), -1)
                if idx is None
                else idx[rows, s : s + EVAL_CHUNK]
            )
            xs, ys = split.gather(pos, at)
            out = model.predict_rows(thetas[rows], xs, rows)
            flat, yy = out.reshape(-1, *out.shape[2:]), ys.reshape(-1)
            if score == "loss":
                per = model._per_sample(flat, yy)
            elif model.task == "classification":
                per = (flat.argmax(-1) == yy).to(out.dtype)
            else:
                per = (flat.squeeze(-1) - yy) ** 2
            total[rows] += (per.view(len(xs), -1) * valid[rows, s : s + EVAL_CHUNK]).sum(1)
    return total, n.to(total.dtype)
