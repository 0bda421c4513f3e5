"""One process, all clients stacked: build the run from a config and drive the rounds."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..algorithms.base import Algorithm, Context, State, make_algorithm
from ..config import RunConfig
from ..data.protocol import ProtocolOptions
from ..data.registry import DataRequest, load
from ..federation import Federation, build_federation
from ..metrics.recorder import Recorder, peak_rss_bytes
from ..sheaf.graph import ClientGraph, make_graph
from .transport import InProcessTransport, Transport


class DivergenceError(RuntimeError):
    """The loss or the parameters became NaN or infinite."""


@dataclass(eq=False)
class Simulation:
    config: RunConfig
    ctx: Context
    algorithm: Algorithm
    state: State
    transport: Transport

    def step(self) -> None:
        """One synchronous round: local -> (send -> exchange -> receive) per phase."""
        alg, ctx = self.algorithm, self.ctx
        self.state = alg.local(self.state, ctx)
        for phase in range(alg.phases(self.state)):
            incoming = self.transport.exchange(alg.send(self.state, phase, ctx))
            self.state = alg.receive(self.state, incoming, phase, ctx)

    def finite(self) -> bool:
        """Every theta and the last batch losses are finite (one host-device sync a round)."""
        flags = [torch.isfinite(t).all() for t in self.state.thetas]
        if self.state.batch_loss is not None:
            flags.append(torch.isfinite(self.state.batch_loss).all())
        return bool(torch.stack(flags).all())

    def diagnose(self) -> list[str]:
        """Warnings the algorithm has for the user now (step-size conditions), each given once."""
        check = getattr(self.algorithm, "diagnose", None)
        return list(check(self.state, self.ctx)) if callable(check) else []

    def evaluate(self) -> dict[str, Any]:
        """Test metric per client and its mean over the clients that have test data (a data-less
        server node of the special cases is left out of the mean and reported as ``None``).
        ``train_loss`` and ``objective`` use a fixed random subsample of each client's training data
        (:data:`sheaf_fmtl.federation.EVAL_TRAIN_SAMPLES`), so an evaluation costs about a round."""
        fed = self.ctx.fed
        pairs = list(zip(fed.cohorts, self.state.thetas, strict=True))
        with torch.no_grad():
            metric = fed.per_client([c.test_metric(t) for c, t in pairs])
            f = fed.per_client([c.train_loss(t) for c, t in pairs])
            tested = fed.per_client([c.n_test > 0 for c, _ in pairs])
        pen = self.algorithm.penalty(self.state, self.ctx)
        return {
            "per_client": [
                float(v) if ok else None for v, ok in zip(metric.tolist(), tested.tolist(), strict=True)
            ],
            "test_metric": float(metric[tested].mean()),
            "train_loss": float(f.mean()),
            "objective": float(f.sum()) + (pen[0] if pen else 0.0),
            "sheaf_energy": pen[1] if pen else None,
        }


def load_dataset(config: RunConfig):  # noqa: ANN201 - FederatedDataset
    request = DataRequest(
        clients=config.clients,
        seed=config.seed,
        data_dir=Path(config.data_dir) if config.data_dir else None,
        options=config.data,
    )
    return load(config.dataset, request, ProtocolOptions(standardize=config.standardize))


def build_graph(config: RunConfig, num_clients: int) -> ClientGraph:
    return make_graph(
        config.graph,
        num_clients,
        p=config.graph_p,
        k=config.graph_k,
        m=config.graph_m,
        seed=config.seed,
        path=config.graph_file or None,
    )


def resolve_device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("config key 'device' = cuda, but no CUDA device is available; use device=cpu")
    return name


def build_simulation(
    config: RunConfig, fed: Federation | None = None, graph: ClientGraph | None = None
) -> Simulation:
    """Everything a run needs, from the config alone (data, federation, graph, algorithm, state)."""
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    if fed is None:
        fed = build_federation(load_dataset(config), config.model, l2=config.l2, device=device)
    if graph is None:
        graph = build_graph(config, fed.num_clients)
    if graph.num_nodes != fed.num_clients:
        raise ValueError(
            f"graph has {graph.num_nodes} nodes but the federation has {fed.num_clients} clients"
        )
    init_gen = torch.Generator().manual_seed(_derive(config.seed, 1))
    batch_gen = torch.Generator().manual_seed(_derive(config.seed, 2))
    ctx = Context(fed, graph, config, init_gen, batch_gen)
    algorithm = make_algorithm(config)
    return Simulation(config, ctx, algorithm, algorithm.init(ctx), InProcessTransport())


def _derive(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


def divergence_message(round_: int, config: RunConfig) -> str:
    return (
        f"the loss became NaN or infinite at round {round_}; try smaller step sizes "
        f"(alpha={config.alpha}, eta={config.eta}): Theorem 1 asks alpha < 2/(N L) and eta < 2/(lambda D^2)"
    )


def run(
    config: RunConfig, out_dir: str | Path, *, progress: bool = True, sim: Simulation | None = None
) -> dict[str, Any]:
    """Run ``config`` and write the run folder; returns the summary. ``sim``: a simulation built
    elsewhere from ``config`` (e.g. with hand-made maps, :mod:`sheaf_fmtl.sheaf.special_cases`).

    On divergence the folder keeps ``metrics.csv`` up to the last good evaluation and a summary
    with ``status = diverged`` and no final metric; :class:`DivergenceError` is raised.
    """
    t0 = time.perf_counter()
    if sim is None:
        sim = build_simulation(config)
    recorder = Recorder(out_dir, config)
    fed = sim.ctx.fed
    metric_name = "accuracy" if fed.task == "classification" else "mse"
    last = _record(sim, recorder, 0, t0)
    bar = tqdm(
        range(1, config.rounds + 1),
        desc=f"{config.algorithm} on {config.dataset}",
        unit="round",
        disable=not progress,
        dynamic_ncols=True,
    )
    diverged_at = None
    notes: list[str] = []

    def warn() -> None:
        for note in sim.diagnose():
            notes.append(note)
            tqdm.write(f"sheaf-fmtl: warning: {note}")

    warn()
    try:
        for k in bar:
            sim.step()
            if not sim.finite():
                diverged_at = k
                break
            if k % config.eval_every == 0 or k == config.rounds:
                last = _record(sim, recorder, k, t0)
                warn()
                if not math.isfinite(last["objective"]):
                    diverged_at = k
                    break
                bar.set_postfix({metric_name: f"{last['test_metric']:.4f}"})
    finally:
        bar.close()
        recorder.close()
    summary: dict[str, Any] = {
        "algorithm": config.algorithm,
        "dataset": config.dataset,
        "num_clients": fed.num_clients,
        "rounds": config.rounds,
        "seed": config.seed,
        "metric": metric_name,
        "status": "ok" if diverged_at is None else "diverged",
        "final": last["test_metric"] if diverged_at is None else None,
        "per_client": last["per_client"] if diverged_at is None else None,
        "transmitted_bits": sim.transport.bits,
        "wall_seconds": time.perf_counter() - t0,
        "peak_rss_bytes": peak_rss_bytes(),
        "num_edges": sim.ctx.graph.num_edges,
        "model_dims": sorted({int(d) for d in fed.node_dims()}),
        "warnings": notes,
    }
    lambda_max = getattr(sim.state, "lambda_max", None)
    if lambda_max is not None:
        summary["laplacian_lambda_max"] = lambda_max
    if diverged_at is not None:
        summary["diverged_at_round"] = diverged_at
        summary["last_good_round"] = recorder.rows[-1]["round"] if recorder.rows else None
        late = sim.diagnose()  # e.g. Theorem 1's map-step bound, from the norms seen before the NaN
        notes.extend(late)
        summary["message"] = "; ".join([divergence_message(diverged_at, config), *late])
        recorder.summary(summary)
        raise DivergenceError(summary["message"])
    recorder.checkpoint(
        {
            "thetas": [
                sim.state.thetas[fed.cohort_of[i]][fed.position[i]].cpu() for i in range(fed.num_clients)
            ],
            "edges": torch.as_tensor(sim.ctx.graph.edges),
            **sim.algorithm.checkpoint(sim.state, sim.ctx),
        }
    )
    recorder.summary(summary)
    return summary


def _record(sim: Simulation, recorder: Recorder, k: int, t0: float) -> dict[str, Any]:
    ev = sim.evaluate()
    row = {
        "round": k,
        **{key: ev[key] for key in ("test_metric", "train_loss", "objective", "sheaf_energy")},
        "transmitted_bits": sim.transport.bits,
        "wall_seconds": time.perf_counter() - t0,
    }
    if math.isfinite(ev["objective"]):
        recorder.log(row)
    return ev
