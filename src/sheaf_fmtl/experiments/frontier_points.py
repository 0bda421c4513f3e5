"""What the frontier (:mod:`.frontier`) runs and reports: a :class:`Method` (a curve of levels) and
a :class:`Point` (one level's recorded summaries). Its own module, so that the report
(:mod:`.frontier_report`) reads points without importing the frontier that makes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import RunConfig


@dataclass(frozen=True)
class Method:
    """A curve: ``keys`` at each of ``levels`` (values of ``knob``), each level's strength tuned
    over ``grid`` (key sets; a callable of the level for the sheaf's ``lam``)."""

    label: str
    slug: str
    keys: dict[str, Any]
    knob: str | None = None
    levels: tuple[Any, ...] = (None,)
    quick_levels: tuple[Any, ...] | None = None
    grid: str = "dfedu"  # dfedu | choco | sheaf | estimates | none
    quick: bool = True  # part of --quick
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    problem: str
    method: Method
    level: Any
    config: RunConfig  # the test run's config for seed 0 (the tuned strength)
    strength: dict[str, Any]
    summaries: list[dict[str, Any]]
    folder: Path | None = None  # the level's cell folder: each seed's run in ``seed<k>``

    def values(self, key: str) -> np.ndarray:
        return np.array([s[key] for s in self.summaries if s.get("final") is not None], dtype=float)

    def run_dirs(self) -> list[Path]:
        """The run folders of the seeds :meth:`values` reads (none without ``folder``)."""
        if self.folder is None:
            return []
        return [self.folder / f"seed{s['seed']}" for s in self.summaries if s.get("final") is not None]
