"""The keys of a run, each with its type, default and doc, in sections read in this order: the
problem (:class:`ProblemKeys`), the training (:class:`TrainingKeys`) and the restriction maps
(:class:`MapKeys`); the rest of the keys follow in :mod:`.keys_run`. :class:`.schema.RunConfig`
is the last section, with the checks; the configuration reference and ``--help-keys`` are made from
the fields (:mod:`.reference`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _key(default: Any, doc: str) -> Any:  # noqa: ANN401 - a dataclass field of any key's type
    """A config key: its default and its doc (the configuration reference and ``--help-keys``
    are made from it, with the type, and the choices and range of :mod:`.values`)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class ProblemKeys:
    """What runs, on which data and clients, over which graph."""

    algorithm: str = _key(
        "sheaf-fmtl",
        "What runs: `sheaf-fmtl` (the paper's Algorithm 1), `local` (no communication), or a baseline: "
        "`dpsgd`, `dfedu`, `fedavg`, `ditto`, `pfedme`, `perfedavg`, `pfedgraph`, `dpfl`, `fedavg-ft`, "
        "`dpsgd-ft` (fine-tuned before scoring), `partial` (a gossiped body, a personal head).",
    )
    dataset: str = _key(
        "synthetic-clusters",
        "Generated: `synthetic-clusters` (the demo's problem: related clients seeing different features), "
        "`synthetic`, `synthetic-hetero`; the paper's: `vehicle`, `gleam`, "
        "`har`, `school`, `rmnist`, `hcifar10` (files found as the Datasets page says); or `file:PATH`, "
        "your own per-client `.npz` or folder of CSVs.",
    )
    model: str = _key(
        "auto",
        "`auto` (`logistic` for classification, `linear` for regression), `logistic`, `linear`, `cnn`, "
        "`cnn-small`, `cnn-medium`, `cnn-large`, `cnn-bn` (`cnn` with BatchNorm, statistics kept per "
        "client), or a comma list assigned to the clients round-robin.",
    )
    loss: str = _key(
        "auto",
        "`auto`: cross-entropy (classification) or squared loss (regression); or your own loss "
        "`(outputs, targets) -> scalar` as `module:function` (see the guide to your own models).",
    )
    metric: str = _key(
        "auto",
        "`auto`: accuracy (classification) or MSE (regression); or your own metric "
        "`(outputs, targets) -> float` as `module:function`.",
    )
    metric_goal: str = _key(
        "auto",
        "Whether a higher `metric` is better, for `sweep`'s ranking: `max`, `min`, or `auto` (accuracy: "
        "higher, MSE: lower; your own metric: its function's attribute `higher_is_better`, which `sweep` "
        "then needs).",
    )
    clients: int | None = _key(None, "Number of clients; `null`: the dataset's own.")
    graph: str = _key(
        "erdos-renyi",
        "The client graph: `erdos-renyi` (`graph_p` or `graph_degree`), `watts-strogatz` (`graph_k`, "
        "`graph_p`), `barabasi-albert` (`graph_m`), `complete`, `star`, or `file` (`graph_file`).",
    )
    topology: str = _key(
        "none",
        "`none`, or a special case of the paper, run with fixed maps: `conventional-fmtl`, "
        "`personalised-fl`, `hybrid-fl` (it sets `eta=0`, `gamma=1`).",
    )


@dataclass(frozen=True)
class TrainingKeys(ProblemKeys):
    """The rounds, the local steps, the coupling strength and the step sizes."""

    rounds: int = _key(200, "Communication rounds.")
    batch_size: int = _key(32, "Mini-batch per client; 0: the client's whole training data.")
    local_steps: int = _key(1, "Gradient steps per exchange when `local_epochs` is 0 (1: Algorithm 1).")
    local_epochs: int = _key(
        1,
        "`E > 0`: each round, `E` passes of mini-batch SGD over each client's data, then the exchange "
        "(the paper's training protocol); 0: `local_steps` steps a round (Algorithm 1 as written).",
    )
    init: str = _key(
        "common",
        "`common`: the clients of an architecture start from one model drawn from the seed; "
        "`per-client`: one draw each.",
    )
    lam: float | None = _key(
        None,
        "Strength `lambda` of the coupling between neighbours (0: local training). `null`: the default of "
        "the coupling that runs: 0.01 for the paper's learned or fixed maps and the baselines other than "
        "dFedU; dFedU the same rule at `q = 1`, `min(0.1, 1 / (alpha lambda_max))`; for "
        "Sheaf-FMTL's coordinate maps `min(pull / q, 1 / (alpha lambda_S))`, which keeps the mode's "
        "dFedU-equivalent pull `lam q` (`redrawn` and `features` 0.1, `aligned` 0.3; `proxy`: exact "
        "averaging) at every compression `q = d_ij/d`, with `lambda_S = 2 (1 - q) + q lambda_max` the "
        "mean-square bound of a round's Laplacian; `functional` 1; `redrawn` with `estimates` half the "
        "consensus step's stability limit, `p / ((2 - p) alpha lambda_max)`. Under budgeted links "
        "(`graph_schedule=matchings` or `sampled-edges`) the pull is divided by the share `b` of the edges "
        "on a round and `lambda_max` is that of a round's graph (at most `2 k` for `k` matchings). "
        "summary.json's `lam_rule` says how it was derived. See the maps page.",
    )
    alpha: float = _key(0.05, "Step size of the model updates.")
    coupling_step: float | None = _key(
        None,
        "With `local_epochs > 0`: the step `c` of the coupling step after the local epochs, `theta_i -= c "
        "lam sum_j P_ij^T (P_ij theta_i - P_ji theta_j)` (pull per round `c lam`), taken outside the "
        "local optimizer. `null`: the local optimizer's effective step, measured each round from how far "
        "it moved each client along its gradients (`alpha` under plain SGD), times `sqrt(S / 16)` for a "
        "round of `S > 16` local steps; a number: that step. Sheaf-FMTL's coordinate and proxy maps, "
        "`functional`, dFedU; the paper's `learned`/`fixed` maps keep `alpha`. See the maps page.",
    )
    eta: float = _key(0.01, "Step size of the restriction-map updates (0: fixed maps).")
    gamma: float = _key(
        0.3,
        "Edge-space size `d_ij = max(1, floor(gamma min(d_i, d_j)))`; the bits sent per edge scale with it.",
    )


@dataclass(frozen=True)
class MapKeys(TrainingKeys):
    """Sheaf-FMTL's restriction maps: the mode, the edge weights, each mode's own keys and the maps'
    storage."""

    maps: str = _key(
        "auto",
        "Restriction maps of `sheaf-fmtl`: `auto` (chosen at start-up for the clients' models: `redrawn` "
        "for neighbouring models of the same size, `features` for linear/logistic models of clients "
        "seeing different features, `proxy` for networks of different sizes on one input shape, `aligned`"
        " for networks of different sizes where no proxy can run, `learned` for tabular models of "
        "different sizes without feature ids; the run records the mode that ran), `learned` (the paper's "
        "Algorithm 1), `fixed` (the same with `eta = 0`), `redrawn` (drawn afresh each round from a seed "
        "both ends know, never stored; `map_kind`, `estimates`), `features` (the weights of the features "
        "two tabular clients both see), `aligned` (the parameter slices two network architectures share),"
        " `proxy` (each client also trains a proxy of one common architecture, the only part that is "
        "coupled), `functional` (the models' outputs on probe inputs both ends draw from the seed). See "
        "the maps page.",
    )
    edge_weights: str = _key(
        "auto",
        "Weights of the edges of Sheaf-FMTL's coordinate maps (`redrawn`, `features`, `aligned`, `proxy`): "
        "`relatedness` (learned from what neighbours exchange: how much a neighbour's values of the "
        "coupled coordinates cost a client on its own training samples, against forgetting them; two "
        "numbers per half-edge every five rounds, counted in the bits), `graph` (the graph's weights, 1 "
        "unless an edge list gives them) or `auto` (`relatedness`, except `graph` for `proxy`: a proxy "
        "trained on another client's task can cost more than a fresh one on this client's samples and "
        "still share what averaging helps). The run records the weights that ran. See the maps page.",
    )
