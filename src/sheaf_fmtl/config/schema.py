"""The typed run configuration: :class:`RunConfig`, every key with its default, validated when it
is built (types, allowed values, ranges, rules that involve several keys), so one place checks the
configs of the CLI and of Python.

Why one module of this size: each key's type, default and doc (the dataclass), its choices and
range (the tables below it) live here once; the configuration reference is made from them
(:mod:`.reference`)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..plugins import PLUGIN_KEYS, PluginError, is_held, is_spec, load_spec
from ..sheaf.graph import GRAPH_KINDS
from ..sheaf.maps import MAP_DTYPES, MAP_INITS
from ..sheaf.selection import MAP_KINDS
from . import registry

#: ``lam`` when the config leaves it open (``null``) and the algorithm is not ``sheaf-fmtl`` (each map mode
#: has its own: :attr:`.registry.MapModeSpec.default_lam`, or the rule of its ``pull``,
#: ``algorithms/coupling_strength.py``); ``redrawn`` with ``estimates`` half its stability limit
#: (:func:`default_lam`; ``algorithms/coordinate_stability.py``).
LAM_DEFAULT = 0.01


class ConfigError(ValueError):
    """One line naming the key and the allowed values."""


#: How much of a value an error message echoes.
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters (built without ever
    forming the whole repr of a huge value)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = 20
    r.maxlevel = 4
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(default: Any, doc: str) -> Any:  # noqa: ANN401 - a dataclass field of any key's type
    """A config key: its default and its doc (the configuration reference and ``--help-keys``
    are made from it, with the type, and the choices and range below)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a run; invalid values raise :class:`ConfigError` in the constructor."""

    algorithm: str = _key(
        "sheaf-fmtl",
        "What runs: `sheaf-fmtl` (the paper's Algorithm 1), `local` (no communication), or a baseline: "
        "`dpsgd`, `dfedu`, `fedavg`, `ditto`, `pfedme`, `perfedavg`.",
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
        "`cnn-small`, `cnn-medium`, `cnn-large`, or a comma list assigned to the clients round-robin.",
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
        "The client graph: `erdos-renyi` (`graph_p`), `watts-strogatz` (`graph_k`, `graph_p`), "
        "`barabasi-albert` (`graph_m`), `complete`, `star`, or `file` (`graph_file`).",
    )
    graph_p: float = _key(0.2, "Edge probability (`erdos-renyi`); rewiring probability (`watts-strogatz`).")
    graph_k: int = _key(4, "Neighbours of each client on the `watts-strogatz` ring.")
    graph_m: int = _key(2, "Edges each new client attaches with (`barabasi-albert`).")
    graph_file: str = _key(
        "", "Edge list for `graph=file`: `i j` or `i j a_ij` (a positive weight, default 1) per line."
    )
    topology: str = _key(
        "none",
        "`none`, or a special case of the paper, run with fixed maps: `conventional-fmtl`, "
        "`personalised-fl`, `hybrid-fl` (it sets `eta=0`, `gamma=1`).",
    )
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
        "the coupling that runs: 0.01 for the baselines and the paper's learned or fixed maps; for "
        "Sheaf-FMTL's coordinate maps `min(pull / q, 1 / (alpha lambda_S))`, which keeps the mode's "
        "dFedU-equivalent pull `lam q` (`redrawn` and `features` 0.1, `aligned` 0.3; `proxy`: exact "
        "averaging) at every compression `q = d_ij/d`, with `lambda_S = 2 (1 - q) + q lambda_max` the "
        "mean-square bound of a round's Laplacian; `functional` 1; `redrawn` with `estimates` half the "
        "consensus step's stability limit, `p / ((2 - p) alpha lambda_max)`. summary.json's `lam_rule` "
        "says how it was derived. See the maps page.",
    )
    alpha: float = _key(0.05, "Step size of the model updates.")
    eta: float = _key(0.01, "Step size of the restriction-map updates (0: fixed maps).")
    gamma: float = _key(
        0.3,
        "Edge-space size `d_ij = max(1, floor(gamma min(d_i, d_j)))`; the bits sent per edge scale with it.",
    )
    maps: str = _key(
        "auto",
        "Restriction maps of `sheaf-fmtl`: `auto` (chosen at start-up for the clients' models: `redrawn` "
        "when neighbouring models have the same size, `features` for linear/logistic clients that see "
        "different features, `aligned` for networks of different sizes; the run records the mode that "
        "ran), `learned` (the paper's Algorithm 1), `fixed` (the same with "
        "`eta = 0`), `redrawn` (drawn afresh each round from a seed both ends know, never stored; "
        "`map_kind`, `estimates`), `features` (the weights of the features two tabular clients both "
        "see), `aligned` (the parameter slices two network architectures share), `proxy` (each client "
        "also trains a proxy of one common architecture, the only part that is coupled), `functional` (the "
        "models' outputs on probe inputs both ends draw from the seed). See the maps page.",
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
    proxy_model: str = _key(
        "",
        "`maps=proxy`: the proxy's architecture, a built-in model name; empty: the run's model with the "
        "fewest parameters.",
    )
    proxy_gamma: float = _key(
        1.0,
        "`maps=proxy`: fraction of the proxy's coordinates an edge couples each round, redrawn from the seed "
        "(1: the whole proxy, dFedU on the proxies; below 1, `lam` reads as `1/proxy_gamma` times dFedU's).",
    )
    distill: float = _key(
        1.0,
        "`maps=proxy`: weight of the mutual distillation `KL(proxy || private) + KL(private || proxy)` "
        "between a client's two models (0: each learns alone).",
    )
    probe_size: int = _key(
        32, "`maps=functional`: inputs per probe batch `B`; `B x outputs` floats per message."
    )
    probe_data: str = _key(
        "",
        "`maps=functional`: a `.npy` of unlabelled inputs `[P, ...]` (or `.npz` with `x`) the probes are "
        "drawn from; empty: seeded Gaussian noise shaped like the inputs (no data leaves a client).",
    )
    map_kind: str = _key(
        "selection",
        "`maps=redrawn`: `selection` of `d_ij` random coordinates (O(d_ij) per edge), or `orthonormal` / "
        "`gaussian` rows (O(d_ij d) per edge, drawn each round).",
    )
    estimates: bool = _key(
        False,
        "`maps=redrawn`: keep a copy of each neighbour's model, refreshed on each round's coordinates, and "
        "couple whole models against it (CHOCO-SGD style; `degree x d` floats per client, same bits).",
    )
    map_init: str = _key(
        "gaussian", "Initial maps (zero maps never learn, and are refused: the paper's Remark)."
    )
    map_scale: float | None = _key(
        None,
        "Scale of the initial maps (sigma; `a` for uniform); `null`: `1/sqrt(d_i)` (uniform: "
        "`sqrt(3/d_i)`), so `P^T P` is close to a projection whatever the model size. The paper's "
        "N(0, 1) is `map_scale=1`, which needs `alpha lam` about `d_i` times smaller.",
    )
    map_dtype: str = _key("float32", "Storage of the maps (`bfloat16`: half the memory).")
    shared_maps: bool = _key(
        True,
        "Both maps of an edge between equal-size models start equal (`P_ji = P_ij`), so the coupling "
        "asks the two models to agree on one projection; `false`: independent draws (the paper's wording).",
    )
    map_draw: str = _key(
        "host",
        "`host`: each map drawn on the CPU from the seed (the same maps on every device); `device`: drawn "
        "per bucket on the device (same law, other numbers; seconds instead of minutes for GiBs of maps).",
    )
    message_mode: str = _key(
        "compact",
        "`compact`: one `d_ij` vector and one scalar per neighbour and round; `literal`: two vectors "
        "(Algorithm 1 as written). Same iterates.",
    )
    map_defer: int = _key(
        -1,
        "Fold the rank-one map updates into the maps every so many rounds (-1: about `sqrt(d_ij)`; "
        "1: every round). Same iterates.",
    )
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
    link_drop_prob: float = _key(
        0.0,
        "Simulated faults: each round each directed link is down (its messages lost) with this probability.",
    )
    processes: int = _key(1, "Run the clients in this many local processes; the numbers of one process.")
    partition: str = _key(
        "contiguous",
        "Clients over processes: `contiguous` blocks of ids, or `community` (fewer edges cross processes).",
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
    data: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Dataset options, `data.KEY=VALUE` (e.g. `data.relatedness=0.5`); unknown options and "
            "values of the wrong type fail, naming the allowed ones (`sheaf-fmtl data describe NAME`)."
        },
    )
    # Baselines (algorithms/*.py)
    dpsgd_order: str = _key(
        "lian", "D-PSGD's update: `lian` (`x <- W x - alpha g(x)`) or `atc` (`x <- W (x - alpha g(x))`)."
    )
    inner_steps: int = _key(5, "pFedMe: gradient steps of the inner (Moreau envelope) solve.")
    inner_lr: float = _key(0.05, "pFedMe: step size of the inner solve.")
    pfedme_beta: float = _key(1.0, "pFedMe: server mixing `w <- (1 - beta) w + beta mean_i w_i`.")
    perfedavg_beta: float = _key(0.01, "Per-FedAvg: meta (outer) step size; `alpha` is the adaptation step.")
    # The local optimizer and schedule (algorithms/optim.py), the loop's callbacks (runtime/run/callbacks.py)
    optimizer: str = _key(
        "sgd",
        "The local steps' optimizer: `sgd` (the paper's), `momentum` (`momentum`) or `adam` (`adam_beta1`, "
        "`adam_beta2`, `adam_eps`), as torch.optim defines them, with state per client; learning rate "
        "`alpha`. Other than `sgd`: with `local` and `fedavg`, and with `sheaf-fmtl`, `dfedu`, `dpsgd` when "
        "`local_epochs > 0`.",
    )
    momentum: float = _key(0.9, "`optimizer=momentum`: the momentum `mu` (`buf <- mu buf + g`).")
    adam_beta1: float = _key(0.9, "`optimizer=adam`: decay of the first moment.")
    adam_beta2: float = _key(0.999, "`optimizer=adam`: decay of the second moment.")
    adam_eps: float = _key(1e-8, "`optimizer=adam`: added to the root of the second moment.")
    lr_schedule: str = _key(
        "constant",
        "Learning rate of the local steps by round `r`: `constant` (`alpha`), `step` (`alpha lr_step_gamma^"
        "floor(r / lr_step_every)`) or `cosine` (`alpha (1 + cos(pi r / rounds)) / 2`); where `optimizer` "
        "may be other than `sgd`.",
    )
    lr_step_every: int = _key(100, "`lr_schedule=step`: rounds between two decays.")
    lr_step_gamma: float = _key(0.1, "`lr_schedule=step`: factor of each decay.")
    log_tensorboard: str = _key(
        "", "Write every evaluated number as a TensorBoard scalar into this folder (needs `[tensorboard]`)."
    )
    early_stop_patience: int = _key(
        0,
        "`N > 0`: stop when the metric on the validation split (it needs `validation > 0`: the test split "
        "never chooses) has not improved for `N` evaluations in a row (`status: stopped`, resumable), and "
        "keep the best evaluation's models in `best.pt` (`sheaf_fmtl.load(run, round='best')`); 0: never.",
    )
    early_stop_min_delta: float = _key(0.0, "What counts as an improvement for `early_stop_patience`.")

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))
        _check_together(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def lam_value(self) -> float:
        """``lam`` as the run uses it: a config that leaves ``lam`` open (``null``) gets its mode's
        default when the run starts (``algorithms/auto_maps.py``); algorithms see only such configs."""
        if self.lam is None:
            raise ValueError("lam is open (null) until the run starts and resolves it")
        return self.lam

    @property
    def learns_maps(self) -> bool:
        """Whether Algorithm 1's map step (eq. (19) ``pijaupdate``) runs: ``maps = learned`` with
        ``eta > 0`` and ``lam > 0`` (``maps = fixed`` is the same algorithm with ``eta = 0``)."""
        return self.maps == "learned" and self.eta > 0 and (self.lam or 0.0) > 0

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, validated like any other config."""
        unknown = sorted(set(changes) - _KNOWN)
        if unknown:
            raise ConfigError(_unknown_key(unknown[0]))
        return dataclasses.replace(self, **changes)


_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_CHOICES: dict[str, tuple[str, ...]] = {
    "graph": GRAPH_KINDS,
    "map_init": MAP_INITS,
    "map_kind": MAP_KINDS,
    "map_dtype": tuple(MAP_DTYPES),
    "message_mode": ("compact", "literal"),
    "dpsgd_order": ("lian", "atc"),
    "init": ("common", "per-client"),
    "edge_weights": ("auto", "relatedness", "graph"),
    "map_draw": ("host", "device"),
    "partition": ("contiguous", "community"),
    "topology": ("none", "conventional-fmtl", "personalised-fl", "hybrid-fl"),
    "metric_goal": ("auto", "max", "min"),
    "optimizer": ("sgd", "momentum", "adam"),
    "lr_schedule": ("constant", "cosine", "step"),
}
# key -> (lower, lower inclusive, upper, upper inclusive, text)
_RANGES: dict[str, tuple[float | None, bool, float | None, bool, str]] = {
    "clients": (2, True, None, False, "clients >= 2"),
    "graph_p": (0.0, False, 1.0, True, "0 < graph_p <= 1"),
    "graph_k": (2, True, None, False, "graph_k >= 2"),
    "graph_m": (1, True, None, False, "graph_m >= 1"),
    "rounds": (1, True, None, False, "rounds >= 1"),
    "batch_size": (0, True, None, False, "batch_size >= 0 (0 = full batch)"),
    "local_steps": (1, True, None, False, "local_steps >= 1"),
    "local_epochs": (0, True, None, False, "local_epochs >= 0 (0 = local_steps steps per round)"),
    "lam": (0.0, True, None, False, "lam >= 0"),
    "alpha": (0.0, False, None, False, "alpha > 0"),
    "eta": (0.0, True, None, False, "eta >= 0"),
    "gamma": (0.0, False, 1.0, True, "0 < gamma <= 1"),
    "distill": (0.0, True, None, False, "distill >= 0"),
    "proxy_gamma": (0.0, False, 1.0, True, "0 < proxy_gamma <= 1"),
    "probe_size": (1, True, None, False, "probe_size >= 1"),
    "map_scale": (0.0, True, None, False, "map_scale >= 0"),
    "l2": (0.0, True, None, False, "l2 >= 0"),
    "map_defer": (-1, True, None, False, "map_defer >= -1 (-1 = auto)"),
    "eval_every": (1, True, None, False, "eval_every >= 1"),
    "checkpoint_every": (-1, True, None, False, "checkpoint_every >= -1 (-1 = eval_every, 0 = none)"),
    "seed": (0, True, None, False, "seed >= 0"),
    "validation": (0.0, True, 1.0, False, "0 <= validation < 1 (0: evaluate on the test split)"),
    "inner_steps": (1, True, None, False, "inner_steps >= 1"),
    "inner_lr": (0.0, False, None, False, "inner_lr > 0"),
    "pfedme_beta": (0.0, False, None, False, "pfedme_beta > 0"),
    "perfedavg_beta": (0.0, False, None, False, "perfedavg_beta > 0"),
    "drop_prob": (0.0, True, 1.0, False, "0 <= drop_prob < 1"),
    "link_drop_prob": (0.0, True, 1.0, False, "0 <= link_drop_prob < 1"),
    "processes": (1, True, None, False, "processes >= 1"),
    "timeout_s": (0.0, False, None, False, "timeout_s > 0"),
    "momentum": (0.0, True, 1.0, False, "0 <= momentum < 1"),
    "adam_beta1": (0.0, True, 1.0, False, "0 <= adam_beta1 < 1"),
    "adam_beta2": (0.0, True, 1.0, False, "0 <= adam_beta2 < 1"),
    "adam_eps": (0.0, False, None, False, "adam_eps > 0"),
    "lr_step_every": (1, True, None, False, "lr_step_every >= 1"),
    "lr_step_gamma": (0.0, False, 1.0, True, "0 < lr_step_gamma <= 1"),
    "early_stop_patience": (0, True, None, False, "early_stop_patience >= 0 (0: never)"),
    "early_stop_min_delta": (0.0, True, None, False, "early_stop_min_delta >= 0"),
}


#: Keys whose choices are the registries' entries (:mod:`.registry`), read when a value is checked.
_REGISTERED = {"algorithm": registry.algorithm_names, "maps": registry.map_mode_names}


def choices(name: str) -> tuple[str, ...] | None:
    """The values key ``name`` allows, or ``None`` when it is not a choice."""
    if name in _REGISTERED:
        return _REGISTERED[name]()
    return _CHOICES.get(name)


def _types(annotation: str) -> tuple[type, ...]:
    if annotation.startswith("int"):
        return (int,)
    if annotation.startswith("float"):
        return (int, float)
    if annotation.startswith("bool"):
        return (bool,)
    return (dict,) if annotation.startswith("dict") else (str,)


_TYPES: dict[str, tuple[type, ...]] = {f.name: _types(str(f.type)) for f in fields(RunConfig)}
_OPTIONAL = {f.name for f in fields(RunConfig) if "None" in str(f.type)}
_KNOWN = set(_TYPES)
# Keys a saved config.yaml carries besides the config (what produced it, the keys it set that the run
# did not read: config.usage); ignored when read back.
PROVENANCE_KEYS = ("versions", "unused")


def _unknown_key(key: object) -> str:
    """The refusal of an unknown key: the closest known keys (``difflib``) when some are close,
    else every known key."""
    name = shown(str(key))[1:-1]
    close = difflib.get_close_matches(str(key).lower().replace("-", "_"), sorted(_KNOWN), n=3, cutoff=0.6)
    if close:
        return f"unknown config key '{name}'; did you mean {' or '.join(repr(k) for k in close)}?"
    return f"unknown config key '{name}'; known keys: {', '.join(sorted(_KNOWN))}"


def _check(name: str, value: Any) -> Any:
    """``value`` for key ``name``, normalised (ints to floats where floats are meant); or ConfigError."""
    if value is None and name in _OPTIONAL:
        return None
    types = _TYPES[name]
    if float in types and isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        want = " or ".join(t.__name__ for t in types)
        raise ConfigError(f"config key '{name}': expected {want}, got {type(value).__name__} {shown(value)}")
    if float in types:
        value = float(value)  # type: ignore[arg-type]  # an int or float, checked above
        if not math.isfinite(value):
            raise ConfigError(f"config key '{name}' = {shown(value)} is not a finite number")
    if name == "data":
        return dict(value)
    if name in PLUGIN_KEYS:
        _check_code(name, value)
        if is_held(value):
            return value
    if name == "map_init" and value == "zeros":
        raise ConfigError(
            "config key 'map_init' = zeros is rejected: zero restriction maps never learn "
            f"(paper Remark); allowed: {', '.join(_CHOICES[name])}"
        )
    allowed = choices(name)
    if allowed is not None and value not in allowed:
        close = difflib.get_close_matches(str(value).lower(), allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"config key '{name}': {shown(value)} is not allowed; {hint}allowed: {', '.join(allowed)}"
        )
    if name == "device" and not _DEVICE.fullmatch(value):
        raise ConfigError(f"config key 'device': {shown(value)} is not allowed; allowed: cpu, cuda, cuda:N")
    if name in _RANGES:
        lo, lo_in, hi, hi_in, text = _RANGES[name]
        bad = (lo is not None and (value < lo if lo_in else value <= lo)) or (
            hi is not None and (value > hi if hi_in else value >= hi)
        )
        if bad:
            raise ConfigError(f"config key '{name}' = {shown(value)} is out of range; allowed: {text}")
    return value


def _check_code(name: str, value: str) -> None:
    """Import the ``module:function`` a key names (config keys naming user code, ``plugins``)."""
    for part in value.split(",") if name == "model" else [value]:
        if is_spec(part.strip()):
            try:
                load_spec(name, part.strip())
            except PluginError as e:
                raise ConfigError(str(e)) from None
    if name in ("loss", "metric") and value != "auto" and not is_spec(value) and not is_held(value):
        raise ConfigError(
            f"config key '{name}': {shown(value)} is not allowed; allowed: auto, or module:function"
        )


def _check_together(config: RunConfig) -> None:
    """Rules that involve several keys."""
    if config.graph == "file" and not config.graph_file:
        raise ConfigError("config key 'graph_file' must name an edge-list file when graph = file")
    if config.graph_file and config.graph != "file":
        raise ConfigError(
            f"config key 'graph_file' is set but graph = {config.graph}, which ignores it; "
            "add graph=file to use the edge list"
        )
    if config.map_init in ("gaussian", "uniform", "orthogonal") and config.map_scale == 0.0:
        raise ConfigError(
            f"config key 'map_scale' = 0 gives zero maps with map_init={config.map_init}; "
            "zero restriction maps never learn (allowed: map_scale > 0)"
        )
    if config.early_stop_patience > 0 and config.validation == 0:
        raise ConfigError(
            f"config key 'early_stop_patience' = {config.early_stop_patience} watches the validation split, "
            "and validation = 0 holds none out (stopping on the test split would choose by test data); "
            "add validation=0.2 (a fraction of each client's training data)"
        )
    _check_maps(config)
    _check_optimizer(config)


# Algorithms whose paper defines the local update as plain SGD in one formula with the rest of the
# update; and those whose local passes (local_epochs > 0) are plain training of f_i, coupled after.
_SGD_BY_PAPER = {
    "ditto": "Ditto's personal step adds the proximal pull to the SGD step",
    "pfedme": "pFedMe's steps solve its Moreau envelope by SGD",
    "perfedavg": "Per-FedAvg's steps are MAML's SGD adaptation and meta step",
}
_SGD_WITHOUT_EPOCHS = ("sheaf-fmtl", "dfedu", "dpsgd")
_IGNORED_UNLESS = {
    "momentum": ("optimizer", "momentum"),
    "adam_beta1": ("optimizer", "adam"),
    "adam_beta2": ("optimizer", "adam"),
    "adam_eps": ("optimizer", "adam"),
    "lr_step_every": ("lr_schedule", "step"),
    "lr_step_gamma": ("lr_schedule", "step"),
}


def _check_optimizer(config: RunConfig) -> None:
    """``optimizer`` / ``lr_schedule`` where the algorithm's local steps may take them; their keys
    only with them."""
    defaults = RunConfig.__dataclass_fields__
    for key, (owner, value) in _IGNORED_UNLESS.items():
        if getattr(config, key) != defaults[key].default and getattr(config, owner) != value:
            raise ConfigError(
                f"config key '{key}' is set but {owner} = {getattr(config, owner)}, which ignores it; "
                f"add {owner}={value} to use it"
            )
    if config.optimizer != "sgd":
        key, value = "optimizer", config.optimizer
    elif config.lr_schedule != "constant":
        key, value = "lr_schedule", config.lr_schedule
    else:
        return
    if config.algorithm in _SGD_BY_PAPER:
        raise ConfigError(
            f"config key '{key}' = {value} does not apply to algorithm={config.algorithm}: "
            f"{_SGD_BY_PAPER[config.algorithm]} (plain SGD at alpha); allowed with local and fedavg, and "
            f"with {', '.join(_SGD_WITHOUT_EPOCHS)} when local_epochs > 0"
        )
    if config.algorithm in _SGD_WITHOUT_EPOCHS and config.local_epochs == 0:
        raise ConfigError(
            f"config key '{key}' = {value} with algorithm={config.algorithm} needs local_epochs > 0: each of "
            "its steps takes the gradient and the coupling in one SGD formula; with local epochs the "
            "optimizer runs the local passes and the coupling step follows the exchange"
        )


def _check_maps(config: RunConfig) -> None:
    """The map modes: which keys go together (what each mode reads: :mod:`.registry`)."""
    if config.maps not in ("learned", registry.AUTO) and config.algorithm != "sheaf-fmtl":
        raise ConfigError(
            f"config key 'maps' = {config.maps} applies to algorithm=sheaf-fmtl only "
            f"(algorithm={config.algorithm} has no restriction maps)"
        )
    if config.estimates and not _mode_reads(config.maps, "estimates"):
        raise ConfigError(
            f"config key 'estimates' = true needs maps={_modes_reading('estimates')} (copies of the "
            f"neighbours' models are refreshed on each round's redrawn coordinates); got maps={config.maps}"
        )
    if config.map_kind != "selection" and not _mode_reads(config.maps, "map_kind"):
        raise ConfigError(
            f"config key 'map_kind' = {config.map_kind} applies to maps={_modes_reading('map_kind')} only; "
            f"got maps={config.maps}"
        )
    spec = registry.map_mode_spec(config.maps)
    if spec is not None and spec.builds_maps and config.topology != "none":
        raise ConfigError(
            f"config key 'maps' = {config.maps} builds its own maps; topology={config.topology} "
            "(fixed maps of a special case) is not allowed with it"
        )


def _mode_reads(mode: str, key: str) -> bool:
    """``maps = mode`` reads ``key`` (``auto``: decided once the mode is chosen)."""
    spec = registry.map_mode_spec(mode)
    return mode == registry.AUTO or (spec is not None and key in spec.reads)


def _modes_reading(key: str) -> str:
    return " or ".join(m for m in registry.map_mode_names() if m != registry.AUTO and _mode_reads(m, key))


def default_lam(config: RunConfig, lambda_max: float | None = None, refresh: float | None = None) -> float:
    """``lam`` of a config that leaves it open, once ``maps`` is known: see the key's doc (each
    mode's :attr:`.registry.MapModeSpec.default_lam`). With estimates: half the consensus step's
    limit ``alpha lam lambda_max <= 2p / (2 - p)`` (``p``: ``refresh``, the smallest ``d_e/d``, else
    ``gamma``; ``lambda_max`` of the graph Laplacian, else 2)."""
    if config.algorithm != "sheaf-fmtl":
        return LAM_DEFAULT
    spec = registry.map_mode_spec(config.maps)
    if spec is not None and "estimates" in spec.reads and config.estimates:
        p = refresh if refresh is not None else config.gamma
        top = lambda_max if lambda_max is not None and lambda_max > 0 else 2.0
        return p / (2.0 - p) / (config.alpha * top)
    return spec.default_lam if spec is not None else LAM_DEFAULT


def validate(config: RunConfig) -> RunConfig:
    """``config`` itself: a :class:`RunConfig` is validated when built (kept for callers)."""
    return config


def from_mapping(mapping: Mapping[str, Any]) -> RunConfig:
    """A validated config from a mapping of keys (a saved ``config.yaml``'s provenance is ignored)."""
    values = {k: v for k, v in mapping.items() if k not in PROVENANCE_KEYS}
    unknown = sorted(str(k) for k in set(values) - _KNOWN)
    if unknown:
        raise ConfigError(_unknown_key(unknown[0]))
    return RunConfig(**values)
