"""``summary.json``'s fields (:func:`summarize`) and the config as a run records it, its ``clients``
counted (:func:`config_with_clients`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ....algorithms.training.coupling_step import CouplingStep, totals
from ....config import RunConfig
from ....config.registry import algorithm_spec, edge_weights_of
from ....federation import Cohorts
from ....metrics.final import VOUCHED, file_digest
from ....metrics.flops import SampleCounter
from ....metrics.memory import peak_memory
from ....plugins import higher_is_better
from ....sheaf.graph import ClientGraph
from ....sheaf.links import BUDGETED, link_fraction
from ...engine.simulate import Simulation
from ..checkpoints.checkpoint import rank_and_world
from ..folder.recorder import software_versions


def summarize(
    sim: Simulation[Any],
    config: RunConfig,
    counter: SampleCounter,
    status: str,
    last: dict[str, Any],
    diverged_at: int | None,
    done: int,
    t0: float,
    notes: list[str],
) -> dict[str, Any]:
    """``summary.json``'s fields common to every status (collectives across processes)."""
    fed = sim.ctx.fed
    summary: dict[str, Any] = {
        "algorithm": config.algorithm,
        "dataset": config.dataset,
        "num_clients": fed.num_clients,
        "rounds": config.rounds,
        "seed": config.seed,
        "metric": fed.metric_name,
        "higher_is_better": higher_is_better(config.metric_goal, config.metric, fed.metric_name),
        "status": status,
        "final": last["test_metric"] if diverged_at is None and last.get("clients_present") != 0 else None,
        "per_client": last["per_client"] if diverged_at is None else None,
        "transmitted_bits": sim.transmitted_bits(),
        **sim.fault_counts(),  # rejected_messages, dropped_messages (runtime/engine/faults.py)
        "wall_seconds": time.perf_counter() - t0,
        **peak_memory(config.device),
        **sim.flops(counter.samples(), diverged_at or done),
        "evaluated_on": "validation" if config.validation > 0 else "test",
        "num_edges": sim.ctx.graph.num_edges,
        **({"graph_joined_edges": sim.ctx.graph.joined_edges} if sim.ctx.graph.joined_edges else {}),
        "model_dims": sorted({int(d) for d in fed.node_dims()}),
        "warnings": notes,
        "versions": software_versions(),
        "compile": sim.compiled,  # the local epochs' step compiled (algorithms/training/epoch.py)
    }
    if sim.compile_note:
        summary["compile_note"] = sim.compile_note
    if config.algorithm == "sheaf-fmtl":  # the coupling that ran (maps = auto: and why)
        summary.update(maps=config.maps, lam=config.lam, maps_auto=sim.maps_chosen, lam_rule=sim.lam_rule)
        summary["edge_weights"] = edge_weights_of(config)  # (auto: the mode's)
    elif config.lam is not None and "lam" in getattr(algorithm_spec(config.algorithm), "reads", ()):
        # a baseline's strength, and how a default one was derived (none for one that reads no lam)
        summary.update(lam=config.lam, lam_rule=sim.lam_rule)
    summary.update({**_layout(sim), **_coupling_step(sim)})  # (both collectives across processes)
    summary.update(_schedule(config, sim.ctx.graph))
    summary.update(_bits_side_by_side(sim, summary["transmitted_bits"], diverged_at or done))
    if getattr(config, "compressor", "none") != "none":  # the compressed gossip that ran
        summary.update(
            compressor=config.compressor, consensus_step=getattr(sim.state, "consensus_step", None)
        )
        summary["consensus_rule"] = getattr(sim.state, "consensus_note", None)
    lambda_max = getattr(sim.state, "lambda_max", None)
    if lambda_max is not None:
        summary["laplacian_lambda_max"] = lambda_max
    kept = getattr(sim.state, "coupling_state_bytes", None)  # e.g. neighbour estimates (maps=redrawn)
    if kept is not None:
        summary["coupling_state_bytes"] = int(sim.ctx.comm.all_sum(torch.tensor(kept, dtype=torch.int64)))
    return summary


def _layout(sim: Simulation[Any]) -> dict[str, Any]:
    """The process layout that ran: ``processes`` and ``clients_per_process``, the clients each rank
    held, in rank order (a collective across processes)."""
    rank, world = rank_and_world()
    held = torch.zeros(world, dtype=torch.int64)
    held[rank] = int(sim.ctx.fed.held.sum())
    return {"processes": world, "clients_per_process": [int(n) for n in sim.ctx.comm.all_sum(held).tolist()]}


def vouched(folder: Path | None) -> dict[str, Any]:
    """``summary.json``'s ``files``: the size and SHA-256 of the run folder's ``config.yaml`` and
    ``preprocessing.json`` as the run leaves them (an export checks them before reading them)."""
    if folder is None:
        return {}
    files = {n: file_digest(folder / n) for n in VOUCHED if (folder / n).is_file()}
    return {"files": files}


def _schedule(config: RunConfig, graph: ClientGraph) -> dict[str, Any]:
    """The graph schedule that ran and who joined when (none for a fixed graph from the start);
    under budgeted links the budget and ``link_fraction``, the share of the edges on a round."""
    out: dict[str, Any] = {}
    if config.graph_schedule != "fixed":
        out["graph_schedule"] = config.graph_schedule
    if config.graph_schedule in BUDGETED:
        out["link_budget"] = config.link_budget
        out["link_fraction"] = float(f"{link_fraction(config.graph_schedule, config.link_budget, graph):.4g}")
    if config.join_round:
        out["join_round"] = config.join_round
    return out


def _bits_side_by_side(sim: Simulation[Any], measured: int, rounds: int) -> dict[str, Any]:
    """The bits a round sent as measured from the payloads and as the algorithm's formula counts
    them (every message delivered), when it has one."""
    analytic = sim.analytic_bits(rounds)
    if analytic is None or rounds <= 0:
        return {}
    return {
        "transmitted_bits_analytic": analytic,
        "bits_per_round": measured / rounds,
        "bits_per_round_analytic": analytic / rounds,
    }


def config_with_clients(config: RunConfig, fed: Cohorts) -> RunConfig:
    """``config`` as run: ``clients`` = the number of clients with training data (the dataset's
    own number when the config left it open; a data-less server node is not counted)."""
    if config.clients is not None:
        return config
    sizes = fed.train_sizes if fed.train_sizes is not None else [len(c.y_train) for c in fed.dataset.clients]
    with_data = sum(int(n) > 0 for n in sizes)  # also clients held elsewhere
    return config.replace(clients=with_data) if with_data >= 2 else config


def _coupling_step(sim: Simulation[Any]) -> dict[str, Any]:
    """The coupling step that ran after the local epochs (``algorithms/training/coupling_step.py``): its rule,
    its mean and the pull per round over every client-round, the local optimizer (a collective)."""
    algorithm, state = sim.algorithm, sim.state
    coupler = getattr(algorithm, "coupler", None)  # maps = proxy: the proxies' coordinate coupling
    if coupler is not None:
        algorithm, state = coupler, getattr(state, "coupling", state)
    step = getattr(algorithm, "coupling", None)
    if not isinstance(step, CouplingStep) or sim.config.local_epochs == 0:
        return {}
    return {**step.record(sim.ctx.comm.all_sum(totals(state))), "optimizer": sim.config.optimizer}
