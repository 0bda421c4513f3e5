"""Scoring given models on a split of their run's data: the test split of a run that was evaluated on
a validation split (``validation > 0``: early stopping, sweep cells), as Lightning's
``trainer.test(ckpt_path="best")`` does. The data are read as the run read them (the same training
data, the validation split held out, the same standardisation), only the split scored differs.

:func:`score` serves ``summary.json``'s ``best_test_<metric>`` (the best evaluation's models, when the
run kept them: early stopping, :class:`~sheaf_fmtl.callbacks.BestCheckpoint`), ``sheaf-fmtl evaluate``
and ``sheaf_fmtl.load(run).evaluate(split=...)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ....config import ConfigError, RunConfig, load_config, read_config_file
from ....data.base import DatasetError
from ....federation import build_federation
from ....metrics.results import split_of
from ....plugins import specs_in, untrusted_specs
from ....spelling import option
from ...engine.schedule import join_rounds, reported
from ...engine.simulate import load_dataset, resolve_device
from ..callbacks.shipped_callbacks import BestCheckpoint

SPLITS = ("test", "validation")


def score(
    config: RunConfig,
    thetas: Sequence[torch.Tensor],
    split: str = "test",
    norms: Mapping[int, dict[str, torch.Tensor]] | None = None,
    after_round: int | None = None,
) -> dict[str, Any]:
    """The metric of one model per client (``thetas``, in client order; ``norms``: the BatchNorm
    statistics of those that have BatchNorm, by client id) on ``split`` of the config's data:
    ``{"split", "metric", "mean", "per_client", "clients", "not_joined"}`` (``mean`` over the
    ``clients`` that have data in that split and, with ``after_round``, the round the models are
    from, had joined by then (``join_round``), as that round's evaluation reported them;
    ``per_client`` ``None`` for the others, ``not_joined`` of them not joined yet), as the run's
    evaluations compute it.

    Raises:
        ValueError: an unknown split, or ``validation`` of a run that held none out.
        DatasetError: ``thetas`` is not one parameter vector per client of the data, of its size.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: allowed: {', '.join(SPLITS)}")
    if split == "validation" and config.validation == 0:
        raise ConfigError(
            "split validation: the run has validation = 0 (it held no validation split out); "
            "its evaluations were on the test split"
        )
    device = resolve_device(config.device)
    dataset = load_dataset(config, split)
    if len(thetas) != dataset.num_clients:
        raise DatasetError(
            f"{len(thetas)} models for the {dataset.num_clients} clients of {config.dataset}'s data "
            "(a run of a special topology adds nodes the data do not have)"
        )
    fed = build_federation(dataset, config.model, l2=config.l2, device=device)
    fed.load_norm_state(dict(norms or {}))
    values, tested = [], []
    with torch.no_grad():
        for cohort in fed.cohorts:
            stacked = torch.stack([thetas[int(i)].reshape(-1) for i in cohort.clients])
            if stacked.shape[1] != cohort.dim:
                raise DatasetError(
                    f"client {int(cohort.clients[0])}: {stacked.shape[1]} parameters, its model "
                    f"{cohort.dim}; are these the run's models?"
                )
            values.append(cohort.test_metric(stacked.to(device, torch.float32)))
            tested.append((cohort.n_test > 0).float())
        metric, has = fed.per_client(values).cpu(), fed.per_client(tested).cpu() > 0
    joined = _joined(config, dataset.num_clients, after_round)
    has &= joined
    per_client = [float(v) if ok else None for v, ok in zip(metric.tolist(), has.tolist(), strict=True)]
    mean = float(metric[has].mean()) if bool(has.any()) else None
    return {
        "split": split,
        "metric": fed.metric_name,
        "mean": mean,
        "per_client": per_client,
        "clients": int(has.sum()),
        "not_joined": int((~joined).sum()),
    }


def _joined(config: RunConfig, num_clients: int, after_round: int | None) -> torch.Tensor:
    """``[N]`` bool: the clients an evaluation after round ``after_round`` reports (``join_round``:
    those that had joined by then; every client when ``None``)."""
    present = (
        None
        if after_round is None
        else reported(join_rounds(config.join_round, num_clients, config.seed), after_round)
    )
    return torch.ones(num_clients, dtype=torch.bool) if present is None else torch.from_numpy(present)


def last_round(summary: Mapping[str, Any], folder: Path) -> int:
    """The last round of the run whose ``summary.json`` is ``summary`` (``rounds_done`` of a stopped
    or interrupted run, ``rounds`` of a finished one): its final models' round."""
    done = summary.get("rounds_done", summary.get("rounds"))
    if not isinstance(done, int) or isinstance(done, bool) or done < 0:
        raise DatasetError(
            f"{folder / 'summary.json'}: rounds_done / rounds = {done!r:.40} is not a number of rounds; "
            "is it a run's file?"
        )
    return done


def best_on_test(config: RunConfig, callbacks: Sequence[Any], num_clients: int) -> dict[str, Any]:
    """``summary.json``'s ``best_test_<metric>`` (and ``best_test_per_client``, ``best_round``): the
    best validation evaluation's models scored on the test split, for a run that evaluated on a
    validation split and kept them (:class:`BestCheckpoint`, e.g. by early stopping; across
    processes rank 0, which gathered every client's); ``{}`` otherwise (on the other ranks too)."""
    if split_of(config.validation) != "validation":
        return {}
    best = next((cb for cb in callbacks if isinstance(cb, BestCheckpoint) and cb.round is not None), None)
    if best is None or len(best.thetas) != num_clients:
        return {}
    try:
        thetas = [best.thetas[i] for i in range(num_clients)]
        scored = score(config, thetas, "test", best.norms, after_round=best.round)
    except DatasetError:  # (a special topology's nodes): the models stay in best.pt
        return {}
    return {
        f"best_test_{scored['metric']}": scored["mean"],
        "best_test_per_client": scored["per_client"],
        "best_round": best.round,
    }


def folder_config(folder: Path, keys: Mapping[str, Any], trust: bool) -> RunConfig:
    """A run folder's ``config.yaml`` with ``keys`` on top, to score its models: the ``module:function``
    code it names is imported only when ``keys`` name it again or with ``trust`` (a run folder never
    runs its own code by itself); a key ``keys`` sets to a value naming no code imports none of the
    folder's."""
    path = folder / "config.yaml"
    saved = {k: v for k, v in read_config_file(path).items() if k not in keys or specs_in({k: keys[k]})}
    untrusted = untrusted_specs(saved, keys)
    if untrusted and not trust:  # checked before anything is imported
        spec, key = next(iter(untrusted.items()))
        raise ConfigError(
            f"{folder}: its config.yaml names code ({key} = {spec}), which scoring its models would run, "
            f"and a run folder never runs its own code; if you trust it, pass {option('trust_plugins', True)}"
        )
    return load_config(path, None, dict(keys))
