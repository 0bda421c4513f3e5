"""Three attacks on a silo's server, each with its outcome as one line (the authenticated silos
example runs them): a certificate of another authority, a valid certificate of a silo that is not a
graph neighbour, and a neighbour's frame altered after it was sealed. Each must be refused; the
server is a real :class:`.links.SiloLinks`, with the neighbours the graph gives it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc
import torch

from .certs import Identity, init_certs, load_identity, silo_name
from .links import METHOD, SiloLinks
from .wire import EDGE, Header, encode


def dial(identity: Identity, address: str, target: int, frame: bytes, timeout_s: float = 10.0) -> str:
    """Send ``frame`` to silo ``target`` at ``address`` as ``identity``; ``"accepted"`` or
    ``"refused (CODE: details)"``."""
    creds = grpc.ssl_channel_credentials(identity.ca, identity.key, identity.cert)
    options = [("grpc.ssl_target_name_override", silo_name(target))]
    with grpc.secure_channel(address, creds, options=options) as channel:
        try:
            channel.unary_unary(METHOD)(frame, timeout=timeout_s)
        except grpc.RpcError as e:
            detail = (e.details() or "").splitlines()[0][:160] if hasattr(e, "details") else str(e)
            if e.code() == grpc.StatusCode.UNAVAILABLE:  # the server ended the handshake
                detail = f"TLS handshake failed: {detail}"
            return f"refused ({e.code().name}: {detail})"
    return "accepted"


def frame_for(sender: int, receiver: int, step: int = 1) -> bytes:
    """A well-formed edge frame from ``sender`` to ``receiver``."""
    data = torch.arange(8, dtype=torch.float32)
    return encode(Header(EDGE, data.dtype, (8,), 0, step, sender, receiver, 0), data)


def run_attacks(certs: Path, target: int, neighbour: int, outsider: int, address: str) -> list[str]:
    """Serve silo ``target`` (its neighbours: ``neighbour`` only) at ``address`` and mount the three
    attacks; one line per attack, in order."""
    server = SiloLinks(load_identity(certs, target), address, timeout_s=10.0)
    server.attach({neighbour: "127.0.0.1:9"})  # (the server's own channels stay unused)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            init_certs(Path(tmp) / "other", max(target, neighbour, outsider) + 1)
            foreign = load_identity(Path(tmp) / "other", neighbour)
            real_ca = load_identity(certs, neighbour).ca  # the attacker trusts the real authority
            foreign = Identity(foreign.rank, real_ca, foreign.cert, foreign.key)
            attacks: list[tuple[str, Callable[[], str]]] = [
                (
                    f"certificate of {silo_name(neighbour)} from another authority",
                    lambda: dial(foreign, address, target, frame_for(neighbour, target)),
                ),
                (
                    f"valid certificate of {silo_name(outsider)}, not a neighbour of {silo_name(target)}",
                    lambda: dial(
                        load_identity(certs, outsider), address, target, frame_for(outsider, target)
                    ),
                ),
                (
                    f"payload of {silo_name(neighbour)} altered after sealing",
                    lambda: dial(
                        load_identity(certs, neighbour), address, target, _tampered(neighbour, target)
                    ),
                ),
            ]
            lines = [f"{what}: {outcome()}" for what, outcome in attacks]
        taken = server.mailbox.take(neighbour, 1, timeout_s=0.0)
        applied = taken is not None and not hasattr(taken, "reason")
        lines[2] += f"; the frame was {'APPLIED' if applied else 'not applied'}"
        return lines
    finally:
        server.close()


def _tampered(sender: int, receiver: int) -> bytes:
    raw = bytearray(frame_for(sender, receiver))
    raw[-40] ^= 0x01  # a payload byte (before the 32-byte digest)
    return bytes(raw)
