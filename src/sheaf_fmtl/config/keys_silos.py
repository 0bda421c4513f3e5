"""The keys of a run across silos over the authenticated transport (:class:`SiloKeys`), after every
other key (:mod:`.keys_run`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..component_keys import Keys, declare_keys, key
from ..spelling import setting
from .errors import ConfigError
from .keys import _key
from .keys_run import StepKeys


@dataclass(frozen=True)
class SiloKeys(StepKeys):
    """How the ranks talk, and a silo's certificates and addresses under ``transport = tls``."""

    transport: str = _key(
        "gloo",
        "Across processes: how the ranks talk. `gloo`: `torch.distributed` (Gloo on the CPU, NCCL with "
        "`device=cuda`), for one trusted cluster; `tls`: silos that serve and dial only their graph "
        "neighbours over gRPC with mutual TLS, each identified by its certificate (the same numbers; see "
        "the authenticated silos page).",
    )


@declare_keys("transport tls", selector="transport", readers=("tls",))
@dataclass(frozen=True)
class TLSKeys(Keys):
    """``transport = tls``: a silo's certificates and the silos' addresses."""

    tls_certs: str = key(
        "", "`transport=tls`: the folder `sheaf-fmtl certs init` wrote; silo `R` reads its `silo-R/`."
    )
    tls_peers: str = key(
        "",
        "`transport=tls`: a YAML file of each silo's address, `R: host:port` (silo `R` listens there); "
        "empty: every silo on this machine's loopback, on free ports.",
    )
    silo: int | None = key(
        None,
        "`transport=tls` across machines: this process is silo `silo` of `tls_peers`, one of `processes` "
        "(null: start every silo on this machine).",
        rule="silo >= 0 (null: every silo on this machine)",
    )

    def check(self, config: Any) -> None:  # noqa: ANN401 - the run's config
        """``transport = tls``: the certificates' folder, and a silo among the ``processes``."""
        if config.transport != "tls":
            return
        if not config.tls_certs:
            raise ConfigError(
                "config key 'tls_certs' must name the certificates' folder with transport = tls: run "
                f"sheaf-fmtl certs init --clients {max(config.processes, 2)} --out certs, then add "
                f"{setting('tls_certs', 'certs')}"
            )
        if config.processes < 2:
            raise ConfigError(
                f"config key 'transport' = tls links silos, and processes = {config.processes} runs one: "
                f"give {setting('processes', 'K')} (the number of silos), or leave transport out"
            )
        if config.silo is not None and config.silo >= config.processes:
            raise ConfigError(
                f"config key 'silo' = {config.silo}: the silos are 0 .. {config.processes - 1} "
                f"(processes = {config.processes}); allowed: 0 <= silo < processes"
            )
        if config.silo is not None and not config.tls_peers:
            raise ConfigError(
                f"config key 'silo' = {config.silo} runs one silo of several machines, which needs their "
                f"addresses: add {setting('tls_peers', 'peers.yaml')} (one 'R: host:port' line per silo)"
            )
