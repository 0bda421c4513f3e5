"""The keys of a run after the maps' (:mod:`.keys`): the data and the evaluation, checkpoints,
simulated faults, processes, where data is found and where the run computes (:class:`RunKeys`); the
baselines' own keys, the local optimizer and schedule, and the loop's callbacks (:class:`StepKeys`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .keys import MapKeys, _key


@dataclass(frozen=True)
class RunKeys(MapKeys):
    """The data and the evaluation, checkpoints, simulated faults, processes, where data is found and
    where the run computes."""

    l2: float = _key(1e-4, "L2 regularisation inside each client's loss.")
    standardize: bool = _key(True, "Standardise features with each client's training statistics.")
    validation: float = _key(
        0.0,
        "`0 < v < 1`: hold out this fraction of each client's training data and evaluate on it, never "
        "reading the test split (what `sweep` tunes on); 0: evaluate on the test split.",
    )
    seed: int = _key(0, "Seed of everything: data split, graph, initial models and maps, batches, faults.")
    eval_every: int = _key(10, "Evaluate (one row of `metrics.csv`) every so many rounds, and at the last.")
    checkpoint_every: int = _key(
        -1,
        "Rounds between resumable checkpoints (-1: at every evaluation; 0: only when stopped by a signal).",
    )
    save_maps: bool = _key(
        True, "Write the final maps into `checkpoint.pt` (`false`: their norms only; GBs at paper scale)."
    )
    stability_check: bool = _key(
        True,
        "Before training, estimate the coupling's largest eigenvalue and refuse `alpha lam lambda_max >= 2` "
        "(the coupling step would diverge), naming the keys to change; warn at `>= 1`.",
    )
    drop_prob: float = _key(0.0, "Simulated faults: each round a client sits out with this probability.")
    clients_per_round: int | None = _key(
        None,
        "Client sampling (FedAvg's fraction `C` of the `K` clients): each round this many clients, drawn "
        "from `seed` and the round alone, take part; the others sit the round out (they train nothing, "
        "send nothing and keep their models), and the server baselines average the participants' models "
        "only (their own weights, renormalised over them). Null: every client, every round.",
    )
    link_drop_prob: float = _key(
        0.0,
        "Simulated faults: each round each directed link is down (its messages lost) with this probability.",
    )
    graph_schedule: str = _key(
        "fixed",
        "The graph of each round: `fixed` (the `graph`), `random-peers` (each round each client picks "
        "`peers` random partners out of `peers_from`, and couples with them and with whoever picked it) or "
        "`exponential` (one-peer exponential graph: round `t` couples `i` with `i + 2^((t-1) mod "
        "ceil(log2 N))` mod N), or a budget of links a round (`matchings`: `link_budget` of the graph's "
        "matchings talk, one when null; `sampled-edges`: `link_budget` of its edges, drawn at random). "
        "Edges off in a round send nothing. See the faults and schedules page.",
    )
    join_round: str = _key(
        "",
        "Clients that join a running federation: one first round per client (`0,0,50,...`), or "
        "`late:K@R` (`K` clients chosen from `seed` join at round `R`); before it a client sends nothing, "
        "trains nothing and keeps its initial model, and its metrics are left out. Empty: all from the "
        "start.",
    )
    processes: int = _key(1, "Run the clients in this many local processes; the numbers of one process.")
    placement: str = _key(
        "contiguous",
        "Clients over processes: `contiguous` blocks of ids, or `community` (fewer edges cross processes). "
        "(Formerly `partition`; `partition=contiguous|community` is still read as `placement`, with a "
        "warning.)",
    )
    timeout_s: float = _key(60.0, "Across processes: seconds a silent peer is waited for; then the run ends.")
    data_dir: str = _key(
        "",
        "Folder holding the dataset's files; when given, the only one searched (see `data_search`). "
        "Empty: `$SHEAF_FMTL_DATA`, then the user data folder (where `sheaf-fmtl data fetch` stores them).",
    )
    data_search: bool = _key(
        False,
        "With `data_dir`: when it lacks a dataset's files, go on searching `$SHEAF_FMTL_DATA` and the user "
        "data folder (`false`: an error naming `data_dir`).",
    )
    device: str = _key("cpu", "Where the run computes.")
    compile: bool | None = _key(
        None,
        "With `local_epochs > 0`: each local mini-batch step as one `torch.compile` graph of static shapes "
        "(every client, the whole batch, zero-weight rows where a client has no sample left; the loop's "
        "numbers up to float rounding); `false`: the uncompiled loop; `null`: what measured faster on the "
        "device (the loop on the CPU). summary.json's `compile` says what ran, `compile_note` why not.",
    )
    partition: str = _key(
        "none",
        "Split one pooled dataset over `clients` (`rmnist`, `hcifar10`: their training images; Python "
        "`data=(x, y)`), as Flower Datasets' partitioners: `dirichlet` (each class over the clients by "
        "`Dir(partition_alpha)` proportions), `classes` (`classes_per_client` classes each), `iid`; each "
        "client's test split is then drawn from its own samples (stratified 75/25). `none`: the dataset's "
        "own clients and protocol. See the datasets guide.",
    )
    data: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Dataset options, `data.KEY=VALUE` (e.g. `data.relatedness=0.5`); unknown options and "
            "values of the wrong type fail, naming the allowed ones (`sheaf-fmtl data describe NAME`)."
        },
    )


@dataclass(frozen=True)
class CompressionKeys(RunKeys):
    """Compressed gossip of the model-gossiping baselines (``algorithms/gossip/compressed.py``,
    ``algorithms/gossip/powergossip.py``; the compressors: ``compression/``)."""

    compressor: str = _key(
        "none",
        "`dfedu`, `dpsgd`: compress what neighbours exchange, CHOCO-SGD's way (each client keeps public "
        "copies of its neighbours' models, moved each round by the compressed difference `C(theta - "
        "theta_hat)`): `top-k`, `rand-k` (values and their indices), `rand-k-seeded` (coordinates drawn "
        "from a seed both ends know: values only), `qsgd` (`quantization_bits`), `sign`; or `powergossip` "
        "(rank-`rank` power-iteration approximations of each weight matrix's difference); `none`: whole "
        "models. See the communication page.",
    )


@dataclass(frozen=True)
class StepKeys(CompressionKeys):
    """The baselines' own keys (``algorithms/*.py``), the local optimizer and schedule
    (``algorithms/training/optim.py``) and the loop's callbacks (``runtime/run/callbacks/callbacks.py``)."""

    # Baselines (algorithms/*.py)
    # The local optimizer and schedule (algorithms/training/optim.py), the loop's callbacks
    optimizer: str = _key(
        "sgd",
        "The local steps' optimizer: `sgd` (the paper's), `momentum` (`momentum`), `adam` (`adam_beta1`, "
        "`adam_beta2`, `adam_eps`), or any elementwise `torch.optim` class by name (`SGD`, `Adam`, `AdamW`, "
        "`RMSprop`, `Adagrad`, ...) or `module:Class`, with `optimizer_args`; one instance over each "
        "cohort's stacked clients, state per client; learning rate `alpha`. Refused when its update is not "
        "elementwise (LBFGS, per-tensor norms). Other than `sgd`: with `local`, `fedavg` and `fedavg-ft`, "
        "and with `sheaf-fmtl`, `dfedu`, `dpsgd`, `dpsgd-ft` when `local_epochs > 0` (the fine-tuning "
        "before scoring stays plain SGD).",
    )
    weight_decay: float | None = _key(
        None,
        "The optimizer's own `weight_decay` (decoupled for `AdamW`, added to the gradient for `SGD`, "
        "`Adam`, ...); `null`: the optimizer's default (0; `AdamW`'s 0.01). Beside `l2`, which is in the "
        "loss.",
    )
    grad_clip: float = _key(
        0.0,
        "Clip each client's gradient to this norm before the optimizer's step (as "
        "`torch.nn.utils.clip_grad_norm_` on that client's parameters alone); 0: no clipping.",
    )
    lr_schedule: str = _key(
        "constant",
        "Learning rate of the local steps by round `r`: `constant` (`alpha`), `step` (`alpha lr_step_gamma^"
        "floor(r / lr_step_every)`) or `cosine` (`alpha (1 + cos(pi r / rounds)) / 2`); where `optimizer` "
        "may be other than `sgd`.",
    )
    lr_scheduler: str = _key(
        "",
        "A `torch.optim.lr_scheduler` class by name (`CosineAnnealingLR`, `StepLR`, `OneCycleLR`, ...) or "
        "`module:Class`, with `lr_scheduler_args`, stepped once per round from `alpha`; `T_max` and "
        "`total_steps` default to `rounds`. Instead of `lr_schedule`; empty: none.",
    )
    transform: str = _key(
        "none",
        "Augmentation of each training mini-batch, on the device, before the forward pass (never in "
        "evaluation): `none`, `random-crop-flip` (pad, random crop, horizontal flip; `transform_args."
        "padding=4`, `transform_args.flip=true`), or `module:function`, a transform of a batched tensor "
        "`[B, ...] -> [B, ...]` (e.g. a `torchvision.transforms.v2` pipeline; with `transform_args`, the "
        "function is called with them and returns the transform). Seeded per client (its own stream).",
    )
    transform_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={"doc": "Keyword arguments of `transform`, `transform_args.KEY=VALUE` (e.g. `padding=2`)."},
    )
