"""What a run over several processes can refuse, checked in the launching process before any rank
starts (so a refusal is one line, exit status 2, printed once): the keys a sharded run does not
support, ``timeout_s``, the device, the data, the graph and the placement of its clients."""

from __future__ import annotations

from ....config import ConfigError, RunConfig
from ....config.registry import registered_name
from ....data.sizes import check_fits, generated_bytes
from ....spelling import setting

#: The longest wait for a silent peer a run accepts (about 11 days; Python's timedelta and the
#: process group's timers overflow long before 1e308).
MAX_TIMEOUT_S = 1e6


def check_processes(config: RunConfig, *, data: bool = True) -> None:
    """Refuse (``ValueError``, one line) what the ranks of ``config`` would refuse once started.

    Args:
        config: a run with ``processes > 1`` (or one rank's config under torchrun).
        data: also load the data and build the graph (the client count, the placement).
    """
    from ...engine.shard import placement
    from ...engine.simulate import build_graph, load_dataset, resolve_device

    if config.topology != "none" or config.map_draw == "device":
        key = f"topology = {config.topology}" if config.topology != "none" else "map_draw = device"
        raise ConfigError(
            f"config key {key} is not supported across processes (processes = {config.processes}); "
            f"use {setting('processes', 1)}"
        )
    if config.timeout_s > MAX_TIMEOUT_S:
        raise ConfigError(
            f"config key 'timeout_s' = {config.timeout_s:g} is too large for a process group; "
            f"allowed: 0 < timeout_s <= {MAX_TIMEOUT_S:g} (about 11 days)"
        )
    resolve_device(config.device)
    if config.clients is not None and config.processes > config.clients:
        raise ConfigError(
            f"processes = {config.processes} is more than the {config.clients} clients; "
            "each process needs at least one client"
        )
    if config.transport == "tls":
        check_silos(config)
    if not data:
        return
    per_rank = generated_bytes(config.dataset, config.clients, dict(config.data))
    if per_rank is not None and config.processes > 1:  # every rank makes the whole dataset
        what = f"{config.processes} processes, each with dataset {config.dataset}"
        check_fits(per_rank * config.processes, what, "lower processes or clients")
    if config.clients is not None:  # each rank reads only its clients: placement from the graph alone
        placement(build_graph(config, config.clients), config.processes, config.placement, config.seed)
        return
    dataset = load_dataset(config)
    graph = build_graph(config, dataset.num_clients)
    if config.processes > graph.num_nodes:
        raise ConfigError(
            f"processes = {config.processes} is more than the {graph.num_nodes} clients of "
            f"{config.dataset}; each process needs at least one client"
        )
    placement(graph, config.processes, config.placement, config.seed)


def check_silos(config: RunConfig) -> None:
    """``transport = tls``: gRPC and cryptography installed, the identities of the silos started here,
    and an algorithm without a parameter
    server (the silo links carry neighbour exchanges, sums and gathers, and no star's server)."""
    from ....algorithms.baselines.server import ServerAlgorithm
    from ....algorithms.protocol.algorithm import ALGORITHMS

    try:
        import cryptography  # noqa: F401
        import grpc  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"config key 'transport' = tls needs grpcio and cryptography ({e}): "
            "pip install 'sheaf-fmtl[silos]'"
        ) from None
    from pathlib import Path

    from ...silonet.certs import load_identity

    for rank in range(config.processes) if config.silo is None else (config.silo,):
        load_identity(Path(config.tls_certs), rank)  # every silo this machine starts has its identity
    kind = ALGORITHMS.get(registered_name(config.algorithm))
    if isinstance(kind, type) and issubclass(kind, ServerAlgorithm):
        raise ConfigError(
            f"config key 'algorithm' = {config.algorithm} needs a parameter server, which is no silo; "
            "transport = tls links neighbours only: choose a decentralized algorithm or "
            f"{setting('transport', 'gloo')}"
        )
