"""Rules between config keys (a key that another key's value ignores or forbids), checked once
every key's own value is (:mod:`.schema`). Each rule takes the run's whole config (a
``RunConfig``, typed ``Any`` here: the schema imports these rules, and no module of a package
imports one that imports it)."""

from __future__ import annotations

from typing import Any

from ..spelling import setting
from . import optimizers, registry, schedulers
from .errors import ConfigError


def _check_together(config: Any) -> None:
    """Rules that involve several components' keys (a component's own rules are its keys'
    ``check``, beside their declaration)."""
    _check_pool(config)
    _check_maps(config)
    _check_optimizer(config)
    _check_compression(config)
    _check_coupling_step(config)
    check_schedule(config)


def _check_pool(config: Any) -> None:
    """``data.pool`` samples the pool a partition splits: refused without ``partition`` (before any
    data are read)."""
    pool = config.data.get("pool") if isinstance(config.data, dict) else None
    if pool and config.partition == "none":
        raise ConfigError(
            f"config key 'data.pool' = {pool!r:.40} samples the pool of images a partition splits, and "
            f"partition = none splits none; add {setting('partition', 'dirichlet')} (or classes, iid), "
            "or leave data.pool out (every client's images as the paper splits them)"
        )


def check_schedule(config: Any) -> None:
    """Per-edge state (``maps=learned`` or ``fixed``, PowerGossip's factors) only on the base graph's
    edges: refused with a schedule whose edges come from every client, or with changing edges or
    late joiners (PowerGossip). CHOCO's compressors keep a copy per edge under a schedule and run."""
    if config.compressor == "powergossip" and config.join_round.strip():
        raise ConfigError(
            "config key 'compressor' = powergossip needs the same links every round (both ends keep "
            f"low-rank factors per edge), and join_round = {config.join_round} keeps late clients' edges "
            f"off; leave join_round out, or choose a CHOCO compressor ({setting('compressor', 'top-k')})"
        )
    if config.graph_schedule == "fixed":
        return
    if config.graph_schedule == "sampled-edges" and config.link_budget is None:
        raise ConfigError(
            "config key 'graph_schedule' = sampled-edges draws a budget of edges each round and needs "
            f"link_budget (the fraction of the graph's edges that talk a round), e.g. "
            f"{setting('link_budget', 0.25)}"
        )
    everyone = config.graph_schedule == "exponential" or (
        config.graph_schedule == "random-peers" and config.peers_from == "all"
    )
    if everyone and config.algorithm == "sheaf-fmtl" and config.maps in ("learned", "fixed"):
        how = "graph_schedule=exponential" if config.graph_schedule == "exponential" else "peers_from=all"
        raise ConfigError(
            f"config key 'maps' = {config.maps} keeps a map per edge of the graph, and {how} draws edges "
            f"among every client; add {setting('peers_from', 'graph')} with "
            f"{setting('graph_schedule', 'random-peers')}, or {setting('maps', 'redrawn')}"
        )
    if config.compressor == "powergossip":
        raise ConfigError(
            "config key 'compressor' = powergossip needs the same links every round (both ends keep "
            f"low-rank factors per edge); set {setting('graph_schedule', 'fixed')}, or choose a CHOCO "
            f"compressor ({setting('compressor', 'top-k')})"
        )


def _check_compression(config: Any) -> None:
    """``compressor`` only where an algorithm gossips whole models (its registry entry reads it)."""
    if config.compressor == "none":
        return
    readers = [a for a, spec in registry.ALGORITHMS.items() if "compressor" in spec.reads]
    if registry.ALGORITHMS and config.algorithm not in readers:
        raise ConfigError(
            f"config key 'compressor' = {config.compressor} applies to algorithm={' or '.join(readers)} "
            f"(compressed gossip of whole models); got algorithm={config.algorithm}: add "
            f"{' or '.join(setting('algorithm', a) for a in readers)}, or {setting('compressor', 'none')} "
            f"(sheaf-fmtl compresses through its maps: {setting('maps', 'redrawn')} with gamma)"
        )
    if config.compressor == "powergossip" and (config.drop_prob > 0 or config.link_drop_prob > 0):
        raise ConfigError(
            "config key 'compressor' = powergossip needs reliable links (both ends of an edge must see the "
            f"same messages to keep the same low-rank factors); set {setting('drop_prob', 0)} and "
            f"{setting('link_drop_prob', 0)}, or choose a CHOCO compressor "
            f"({setting('compressor', 'top-k')}; also rand-k, rand-k-seeded, qsgd, sign)"
        )


# Algorithms whose paper defines the local update as plain SGD in one formula with the rest of the
# update; and those whose local passes (local_epochs > 0) are plain training of f_i, coupled after.
_SGD_BY_PAPER = {
    "ditto": "Ditto's personal step adds the proximal pull to the SGD step",
    "pfedme": "pFedMe's steps solve its Moreau envelope by SGD",
    "perfedavg": "Per-FedAvg's steps are MAML's SGD adaptation and meta step",
    "partial": "its SGD steps move one part of the model at a time (the personal head, then the body)",
}
_SGD_WITHOUT_EPOCHS = ("sheaf-fmtl", "dfedu", "dpsgd", "dpsgd-ft")
_IGNORED_UNLESS = {
    "momentum": ("optimizer", "momentum"),
    "adam_beta1": ("optimizer", "adam"),
    "adam_beta2": ("optimizer", "adam"),
    "adam_eps": ("optimizer", "adam"),
    "lr_step_every": ("lr_schedule", "step"),
    "lr_step_gamma": ("lr_schedule", "step"),
}


def _check_optimizer(config: Any) -> None:
    """``optimizer`` / ``lr_schedule`` / ``lr_scheduler`` (and ``weight_decay``, ``grad_clip``) where
    the algorithm's local steps may take them; their keys only with them; an optimizer or scheduler
    the stacked local steps can run (:func:`.optimizers.check`, :func:`.schedulers.check`)."""
    for key, (owner, value) in _IGNORED_UNLESS.items():
        if getattr(config, key) != type(config).default_of(key) and getattr(config, owner) != value:
            raise ConfigError(
                f"config key '{key}' is set but {owner} = {getattr(config, owner)}, which ignores it; "
                f"add {setting(owner, value)} to use it"
            )
    schedulers.check(config)
    optimizers.check(config)
    if not optimizers.custom(config):
        return
    key, value = next(
        (k, getattr(config, k))
        for k in ("optimizer", "optimizer_args", "weight_decay", "grad_clip", "lr_schedule", "lr_scheduler")
        if getattr(config, k) not in (type(config).default_of(k), {}, None, 0.0)
    )
    if config.algorithm in _SGD_BY_PAPER:
        raise ConfigError(
            f"config key '{key}' = {value} does not apply to algorithm={config.algorithm}: "
            f"{_SGD_BY_PAPER[config.algorithm]} (plain SGD at alpha); allowed with local, fedavg and "
            f"fedavg-ft, and with {', '.join(_SGD_WITHOUT_EPOCHS)} when local_epochs > 0; leave {key} out "
            f"for {config.algorithm}"
        )
    if config.algorithm == "sheaf-fmtl" and config.maps == "proxy":
        raise ConfigError(
            f"config key '{key}' = {value} does not apply to maps=proxy: each local step moves the private "
            "model and the proxy together by plain SGD at alpha; leave it out, or choose maps=aligned "
            "(networks of different sizes) or one architecture for every client (maps=redrawn)"
        )
    if config.algorithm in _SGD_WITHOUT_EPOCHS and config.local_epochs == 0:
        raise ConfigError(
            f"config key '{key}' = {value} with algorithm={config.algorithm} needs local_epochs > 0: each "
            "of its steps takes the gradient and the coupling in one SGD formula; with local epochs the "
            f"optimizer runs the local passes and the coupling step follows the exchange: add "
            f"{setting('local_epochs', 1)}, or leave {key} out"
        )


def _check_maps(config: Any) -> None:
    """The map modes: which keys go together (what each mode reads: :mod:`.registry`)."""
    if config.maps not in ("learned", registry.AUTO) and config.algorithm != "sheaf-fmtl":
        raise ConfigError(
            f"config key 'maps' = {config.maps} applies to algorithm=sheaf-fmtl only "
            f"(algorithm={config.algorithm} has no restriction maps): add "
            f"{setting('algorithm', 'sheaf-fmtl')}, or leave maps out"
        )
    if config.estimates and not _mode_reads(config.maps, "estimates"):
        raise ConfigError(
            f"config key 'estimates' = true needs maps={_modes_reading('estimates')} (copies of the "
            f"neighbours' models are refreshed on each round's redrawn coordinates); got maps="
            f"{config.maps}: add {_settings('maps', _modes_reading('estimates'))}, or leave estimates out"
        )
    if config.map_kind != "selection" and not _mode_reads(config.maps, "map_kind"):
        raise ConfigError(
            f"config key 'map_kind' = {config.map_kind} applies to maps={_modes_reading('map_kind')} "
            f"only; got maps={config.maps}: add {_settings('maps', _modes_reading('map_kind'))}, or "
            "leave map_kind out"
        )
    spec = registry.map_mode_spec(config.maps)
    if spec is not None and spec.builds_maps and config.topology != "none":
        raise ConfigError(
            f"config key 'maps' = {config.maps} builds its own maps; topology={config.topology} "
            f"(fixed maps of a special case) is not allowed with it: leave out maps or "
            f"{setting('topology', 'none')}"
        )


def _mode_reads(mode: str, key: str) -> bool:
    """``maps = mode`` reads ``key`` (``auto``: decided once the mode is chosen)."""
    spec = registry.map_mode_spec(mode)
    return mode == registry.AUTO or (spec is not None and key in spec.reads)


def _settings(key: str, values: str) -> str:
    """``values`` (``a or b``) of ``key``, each as the user gives it."""
    return " or ".join(setting(key, v) for v in values.split(" or "))


def _modes_reading(key: str) -> str:
    return " or ".join(m for m in registry.map_mode_names() if m != registry.AUTO and _mode_reads(m, key))


#: Map modes of ``sheaf-fmtl`` whose coupling step is Algorithm 1's, ``alpha`` for both terms.
_ALGORITHM_1_MAPS = ("learned", "fixed")


def _check_coupling_step(config: Any) -> None:
    """``coupling_step`` only where a coupling step of its own follows the local epochs:
    ``sheaf-fmtl`` with maps other than the paper's and dFedU, with ``local_epochs > 0``."""
    if config.coupling_step is None:
        return
    value = config.coupling_step
    if config.algorithm not in ("sheaf-fmtl", "dfedu"):
        raise ConfigError(
            f"config key 'coupling_step' = {value:g} applies to algorithm=sheaf-fmtl or dfedu (a coupling "
            f"step after the local epochs); got algorithm={config.algorithm}: leave coupling_step out"
        )
    if config.algorithm == "sheaf-fmtl" and (config.maps in _ALGORITHM_1_MAPS or config.topology != "none"):
        what = f"maps={config.maps}" if config.topology == "none" else f"topology={config.topology}"
        raise ConfigError(
            f"config key 'coupling_step' = {value:g} does not apply to {what}: the paper's Algorithm 1 "
            "steps the models by alpha for both terms; leave coupling_step out, or choose another map mode "
            f"({setting('maps', 'auto')})"
        )
    if config.local_epochs == 0:
        raise ConfigError(
            f"config key 'coupling_step' = {value:g} needs local_epochs > 0: with local_epochs = 0 each "
            "step takes the gradient and the coupling in one SGD formula, at alpha; add "
            f"{setting('local_epochs', 1)}, or leave coupling_step out"
        )
