"""What the MLflow and W&B loggers (:mod:`.mlflow_logger`, :mod:`.wandb_logger`) share: the
parameters a run is logged with, the numbers of an evaluated row and of the summary, the per-edge
series of the final state, the store folder a logger creates, and the record in the run folder of
the tracker's run it writes (a resumed run continues that one, from the round after the last one
logged, so no round is logged twice)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ....config import RunConfig
from ....config.files import replace_file
from ....data.bounded import read_text_bounded
from ....spelling import option
from ..folder.clearing import STORE, check_replaceable, claim_entry

#: Graphs with more edges log no per-edge series (their rounds would be many thousands of series).
MAX_EDGES = 500
#: The prefix of the learned edge weights' series (``edge_weight/i-j``).
WEIGHT = "edge_weight/"
#: The longest parameter value logged (MLflow's limit); a longer one is cut.
MAX_PARAM_CHARS = 6000


def config_of(config: RunConfig) -> dict[str, Any]:
    """The config as run (``config.yaml``'s keys: ``lam`` and ``maps`` as resolved when the run
    started), a mapping key's entries as ``key.NAME`` (``data.groups``)."""
    out: dict[str, Any] = {}
    for key, value in config.to_dict().items():
        if isinstance(value, Mapping) and value:
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def params_of(config: RunConfig) -> dict[str, str]:
    """:func:`config_of` with every value as text (MLflow's parameters)."""
    return {k: _text(v) for k, v in config_of(config).items()}


def _text(value: Any) -> str:  # noqa: ANN401 - any config value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_PARAM_CHARS]


def numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a row or summary (no ``round``, no booleans, no lists)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k != "round" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def texts(summary: Mapping[str, Any]) -> dict[str, str]:
    """The text entries of a summary (``status``, ``maps``, ``lam_rule``, ``evaluated_on``, ...)."""
    return {k: v[:MAX_PARAM_CHARS] for k, v in summary.items() if isinstance(v, str)}


def edge_series(final: Mapping[str, Any] | None, last_round: int) -> list[tuple[str, int, float]]:
    """``(key, round, value)`` of the per-edge quantities a final state records: each graph edge's
    learned weight ``edge_weight/i-j`` at the rounds it was exchanged (``edge_weight_history`` at
    ``edge_weight_rounds``), and each restriction map's Frobenius norm ``map_norm/i-j`` (``P_ij``,
    from ``map_norms`` per half-edge) at ``last_round``; none for more than :data:`MAX_EDGES` edges."""
    if not final or final.get("edges") is None or len(final["edges"]) > MAX_EDGES:
        return []
    edges = [(int(i), int(j)) for i, j in final["edges"].tolist()]
    out: list[tuple[str, int, float]] = []
    history, rounds = final.get("edge_weight_history"), final.get("edge_weight_rounds")
    if history is not None and rounds is not None:
        for k, r in enumerate(rounds.tolist()):
            row = history[k].tolist()
            out += [(f"{WEIGHT}{i}-{j}", int(r), float(row[e])) for e, (i, j) in enumerate(edges)]
    norms = final.get("map_norms")
    if norms is not None:
        for h, value in enumerate(norms.tolist()):
            i, j = edges[h // 2] if h % 2 == 0 else edges[h // 2][::-1]
            out.append((f"map_norm/{i}-{j}", last_round, float(value)))
    return out


def new_series(
    final: Mapping[str, Any] | None, last_round: int, record: Record
) -> list[tuple[str, int, float]]:
    """:func:`edge_series` less the edge weights of rounds ``record`` says were logged (by the run
    before a resume); ``record.series_until`` moves to the last edge-weight round returned."""
    out = [
        s for s in edge_series(final, last_round) if not s[0].startswith(WEIGHT) or s[1] > record.series_until
    ]
    record.series_until = max([record.series_until, *(r for k, r, _ in out if k.startswith(WEIGHT))])
    return out


def tracker_uri(path: Path) -> str:
    """A local folder as a ``file:`` URI (MLflow's file store)."""
    return path.expanduser().resolve().as_uri()


def prepare_store(out: Path | None, folder: Path, create: Callable[[Path], object] | None = None) -> None:
    """Create ``folder``, a logger's store, when it is missing (with ``create``, else as an empty
    folder); one created inside the run folder ``out`` is recorded in its ledger and marked as the
    logger's whole (``--overwrite`` removes it)."""
    if folder.exists() or folder.is_symlink():
        return
    claim_entry(out, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    if create is None:
        folder.mkdir()
    else:
        create(folder)
    (folder / STORE).write_text("written by a sheaf-fmtl logger; --overwrite removes this folder whole\n")


class Record:
    """The run folder's record of the tracker's run a logger writes (``RUN_DIR/NAME``: ``run_id``,
    ``last_round`` of the rows logged, ``series_until``: the last round of the edge weights logged),
    read when a resumed run starts; nothing without a run folder."""

    def __init__(self, out: Path | None, name: str) -> None:
        self.path = None if out is None else out / name
        self.out = out
        self.run_id: str | None = None
        self.last_round, self.series_until = -1, -1
        self.extra: dict[str, Any] = {}
        if self.path is None or self.path.is_symlink() or not self.path.is_file():
            return
        check_replaceable(out or Path("."), [name], option("out"))  # a file of yours of that name: refused
        try:
            saved = json.loads(read_text_bounded(self.path))
        except (OSError, ValueError):
            return
        if isinstance(saved, dict) and isinstance(saved.get("run_id"), str):
            self.run_id = saved["run_id"]
            self.last_round = int(saved.get("last_round", -1))
            self.series_until = int(saved.get("series_until", -1))
            self.extra = {k: v for k, v in saved.items() if k not in ("run_id", "last_round", "series_until")}

    def save(self) -> None:
        """Write the record whole (claimed in the folder's ledger the first time)."""
        if self.path is None or self.run_id is None:
            return
        if not self.path.exists():
            check_replaceable(self.path.parent, [self.path.name], option("out"))
            claim_entry(self.out, self.path)
        payload = {"run_id": self.run_id, "last_round": self.last_round, "series_until": self.series_until}
        replace_file(self.path, json.dumps({**payload, **self.extra}, indent=2) + "\n")
