"""A trained client model behind the preprocessing its run's data pipeline applied to its
features (:class:`Preprocessed`): what ``sheaf_fmtl.load(run).client(i)`` returns, taking raw
features."""

from __future__ import annotations

import torch
from torch import nn


class Preprocessed(nn.Module):
    """``model`` applied to features preprocessed as the run's data pipeline did: ``x`` cast to
    float32, then ``(x - mean) / std`` when the client's features were standardised."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self, model: nn.Module, standardize: dict[str, list[float]] | None, shape: list[int]
    ) -> None:
        super().__init__()
        self.model = model
        self.standardized = standardize is not None
        if standardize is not None:
            self.register_buffer(
                "mean", torch.tensor(standardize["mean"], dtype=torch.float32).view(1, *shape)
            )
            self.register_buffer("std", torch.tensor(standardize["std"], dtype=torch.float32).view(1, *shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x).to(torch.float32)
        if self.standardized:
            x = (x - self.mean) / self.std
        return self.model(x)  # type: ignore[no-any-return]
