"""This process's silo, when it runs as one (``transport = tls``): joining (its identity, its
address, its server), the current :class:`~.group.SiloGroup` for the code that would otherwise ask
``torch.distributed``, and leaving. Imports gRPC only when a silo joins.

Addresses: ``tls_peers`` (a YAML mapping ``R: host:port``, one entry per silo), or, for the silos
that ``processes = K`` starts on one machine, the loopback file the launcher wrote
(:data:`PEERS_ENV`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ...config import ConfigError, RunConfig

if TYPE_CHECKING:
    from .group import SiloGroup


#: Set by the launcher of ``processes = K`` silos on one machine: their peers file.
PEERS_ENV = "SHEAF_FMTL_SILO_PEERS"

_CURRENT: list[SiloGroup] = []


def current() -> SiloGroup | None:
    """The silo this process runs as, or ``None`` (one process, or ``torch.distributed``)."""
    return _CURRENT[0] if _CURRENT else None


def read_peers(path: Path, world: int) -> dict[int, str]:
    """Silo rank -> ``host:port`` from a peers file; ConfigError (one line) unless it names exactly
    silos ``0 .. world-1``, each with a port."""
    what = f"config key 'tls_peers' = {path}"
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"{what}: cannot be read ({e.strerror or e})") from None
    except yaml.YAMLError:
        raise ConfigError(f"{what} is not YAML (one 'R: host:port' line per silo)") from None
    if not isinstance(raw, dict) or not all(isinstance(k, int) for k in raw):
        raise ConfigError(f"{what} must map each silo's rank to host:port (e.g. '0: 10.0.0.1:50051')")
    if sorted(raw) != list(range(world)):
        raise ConfigError(
            f"{what} names silos {sorted(raw)}; processes = {world} needs exactly 0 .. {world - 1}"
        )
    out = {}
    for rank, address in raw.items():
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{what}: silo {rank}'s address {address!r} is not host:port")
        out[rank] = f"{host}:{port}"
    return out


def write_loopback_peers(path: Path, ports: list[int]) -> None:
    """The peers file of ``len(ports)`` silos on this machine's loopback."""
    path.write_text(yaml.safe_dump({r: f"127.0.0.1:{p}" for r, p in enumerate(ports)}))


def join(config: RunConfig, rank: int, world: int) -> SiloGroup:
    """Become silo ``rank`` of ``world``: read its identity, start its server on its address (the
    links to the neighbours are made once the graph is known, :meth:`SiloGroup.attach`)."""
    from .certs import load_identity
    from .group import SiloGroup
    from .links import SiloLinks

    peers = config.tls_peers or os.environ.get(PEERS_ENV, "")
    if not peers:
        raise ConfigError(f"config key 'tls_peers' must name the silos' addresses for silo {rank}")
    addresses = read_peers(Path(peers), world)
    identity = load_identity(Path(config.tls_certs), rank)
    links = SiloLinks(identity, addresses[rank], config.timeout_s)
    group = SiloGroup(links, rank, world, addresses)
    _CURRENT[:] = [group]
    return group


def leave() -> None:
    """Close this silo's links (nothing when none is open)."""
    group = current()
    _CURRENT.clear()
    if group is not None:
        group.links.close()
