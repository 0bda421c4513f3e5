"""A silo's links to its graph neighbours: one gRPC server with mutual TLS, one channel per neighbour.

Every call is checked before its body is read: the TLS handshake admits only certificates of the
federation's authority (:mod:`.certs`), and the caller's identity (its certificate's common name,
``silo-R``) must be one of this silo's graph neighbours; any other caller gets ``PERMISSION_DENIED``
("refused: ..."). Outgoing, a silo dials each neighbour's address expecting that neighbour's identity
(the channel's target name), so an address that answers with another certificate is refused too.

A frame (:mod:`.wire`) that passes lands in the :class:`Mailbox`, keyed by ``(sender, step)``; the
sender named in the header must be the certificate's, the receiver this silo. A frame that fails
(bad digest, a stale or repeated step, another sender) is refused and counted; where its header
names a step still to come, that step is marked refused, so the silo does not wait for it.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from .certs import Identity, silo_name, silo_rank
from .wire import Frame, WireError, decode, decode_header

SERVICE = "sheaf_fmtl.SiloLink"
METHOD = f"/{SERVICE}/Deliver"
MAX_MESSAGE = 2**31 - 1
#: Frames a silo holds for steps it has not reached, per neighbour (a neighbour runs ahead by a few).
AHEAD_LIMIT = 256
_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE)]


class SiloLinkError(RuntimeError):
    """A neighbour could not be reached, stayed silent past ``timeout_s``, or sent what was refused
    where nothing can replace it."""


@dataclass(frozen=True)
class Refused:
    """What stands in a mailbox slot for a frame that was refused."""

    reason: str


class Mailbox:
    """Frames received from the neighbours, by ``(sender, step)``; thread-safe (the server's threads
    put, the silo's own thread takes)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._slots: dict[tuple[int, int], Frame | Refused] = {}
        self._floor: dict[int, int] = {}  # per sender: the first step not yet taken
        self._refused = 0  # frames refused without a slot to mark
        self._cond = threading.Condition()

    def put(self, peer: int, raw: bytes) -> str | None:
        """File a frame from the neighbour ``peer`` (as its certificate says); the reason it is
        refused, or ``None``."""
        try:
            header, _ = decode_header(raw)
        except WireError as e:
            return self._count(str(e))
        if header.sender != peer:
            return self._count(f"header names silo {header.sender}, the certificate silo {peer}")
        if header.receiver != self.rank:
            return self._count(f"frame for silo {header.receiver}, not this silo {self.rank}")
        key = (peer, header.step)
        with self._cond:
            floor = self._floor.get(peer, 0)
            if header.step < floor:
                return self._count_locked(f"step {header.step} is over (round {header.round})")
            if key in self._slots:
                return self._count_locked(f"step {header.step} was received already")
            if sum(1 for s, _ in self._slots if s == peer) >= AHEAD_LIMIT:
                return self._count_locked(f"more than {AHEAD_LIMIT} frames ahead")
            try:
                item: Frame | Refused = decode(raw)
            except WireError as e:
                item = Refused(str(e))
            self._slots[key] = item
            self._cond.notify_all()
        return item.reason if isinstance(item, Refused) else None

    def _count(self, reason: str) -> str:
        with self._cond:
            return self._count_locked(reason)

    def _count_locked(self, reason: str) -> str:
        self._refused += 1
        return reason

    def take(self, sender: int, step: int, timeout_s: float) -> Frame | Refused | None:
        """The frame (or refusal) of ``(sender, step)``, waiting up to ``timeout_s``; ``None`` when
        none came. Frames of earlier steps still held are dropped and counted as refused."""
        key = (sender, step)
        with self._cond:
            self._cond.wait_for(lambda: key in self._slots, timeout=timeout_s)
            item = self._slots.pop(key, None)
            if item is not None:
                stale = [k for k in self._slots if k[0] == sender and k[1] < step]
                for k in stale:
                    del self._slots[k]
                self._refused += len(stale)
                self._floor[sender] = step + 1
            return item

    def refused_count(self) -> int:
        """Frames refused so far without a slot to mark (a slot's refusal is counted by its taker)."""
        with self._cond:
            return self._refused


def peer_identity(context: grpc.ServicerContext) -> str:
    """The common name of the certificate the caller presented (``""`` without one)."""
    auth = context.auth_context()
    names = auth.get("x509_common_name") or []
    return names[0].decode(errors="replace") if names else ""


class SiloLinks:
    """This silo's server and its channels to the neighbours (see the module docstring)."""

    def __init__(self, identity: Identity, listen: str, timeout_s: float) -> None:
        self.identity, self.timeout_s = identity, timeout_s
        self.mailbox = Mailbox(identity.rank)
        self.neighbours: frozenset[int] = frozenset()
        self._attached = threading.Event()
        self._channels: dict[int, grpc.Channel] = {}
        self._calls: dict[int, Any] = {}
        self.refusals: list[str] = []  # why callers were refused, for the record (thread-safe appends)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=_OPTIONS)
        handler = grpc.unary_unary_rpc_method_handler(self._deliver)
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Deliver": handler}),)
        )
        creds = grpc.ssl_server_credentials(
            [(identity.key, identity.cert)], root_certificates=identity.ca, require_client_auth=True
        )
        try:
            bound = self._server.add_secure_port(listen, creds)
        except RuntimeError:
            bound = 0
        if not bound:
            raise SiloLinkError(
                f"silo {identity.rank} cannot listen on {listen} (in use, or not this machine's)"
            )
        self._server.start()

    def attach(self, neighbours: dict[int, str]) -> None:
        """Dial each neighbour (rank -> ``host:port``), expecting its identity; from now on calls
        from these neighbours are admitted."""
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.identity.ca,
            private_key=self.identity.key,
            certificate_chain=self.identity.cert,
        )
        for rank, address in sorted(neighbours.items()):
            options = [*_OPTIONS, ("grpc.ssl_target_name_override", silo_name(rank))]
            channel = grpc.secure_channel(address, creds, options=options)
            self._channels[rank] = channel
            self._calls[rank] = channel.unary_unary(METHOD)
        self.neighbours = frozenset(neighbours)
        self._attached.set()

    # -- serving --------------------------------------------------------------------------------
    def _deliver(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        name = peer_identity(context)
        peer = silo_rank(name)
        self._attached.wait(self.timeout_s)  # a neighbour may start before this silo knows the graph
        if peer is None or peer not in self.neighbours:
            who = name or "a caller without identity"
            why = f"refused: {who} is not a graph neighbour of silo {self.identity.rank}"
            self.refusals.append(why)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        assert peer is not None  # (abort raised otherwise)
        reason = self.mailbox.put(peer, request)
        if reason is not None:
            why = f"refused: frame from {name}: {reason}"
            self.refusals.append(why)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
        return b"ok"

    # -- sending --------------------------------------------------------------------------------
    def send(self, rank: int, frame: bytes) -> Any:
        """Start sending ``frame`` to neighbour ``rank``; a future (:meth:`settle` it)."""
        return self._calls[rank].future(frame, timeout=self.timeout_s, wait_for_ready=True)

    def settle(self, rank: int, sent: Any) -> None:
        """Wait until neighbour ``rank`` has filed a frame sent by :meth:`send`."""
        try:
            sent.result()
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            detail = e.details() if hasattr(e, "details") else str(e)
            raise SiloLinkError(
                f"silo {self.identity.rank}: sending to silo {rank} failed "
                f"({getattr(code, 'name', code)}: {detail})"
            ) from None

    def take(self, rank: int, step: int) -> Frame | Refused:
        got = self.mailbox.take(rank, step, self.timeout_s)
        if got is None:
            raise SiloLinkError(
                f"silo {self.identity.rank}: silo {rank} sent nothing for step {step} within "
                f"timeout_s = {self.timeout_s:g} s"
            )
        return got

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._server.stop(grace=1.0).wait()
