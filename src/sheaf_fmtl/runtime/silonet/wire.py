"""Frames on the silo links: one tensor's raw bytes behind a fixed, typed header, then a digest.

Layout (little-endian)::

    magic "SFW1" | kind u8 | dtype u8 | ndim u8 | 0 u8 | round u64 | step u64 | sender u32 |
    receiver u32 | edge u64 | shape ndim x u64 | payload length u64 | payload | SHA-256 (32 bytes)

``step`` numbers the operations of a run on the links (every silo performs them in the same order);
``edge`` names what the payload carries (for the edge exchange: the payload's name and the undirected
edges in it, :func:`edge_tag`). The digest covers header and payload. Nothing is unpickled: a frame
decodes to a :class:`Frame` of plain numbers and a tensor of a listed dtype, or :class:`WireError`.

A set of named tensors (a final model gather) travels as one ``uint8`` frame whose payload is
:func:`pack_tensors`: a JSON table of names, dtypes, shapes and offsets, then the bytes.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np
import torch

MAGIC = b"SFW1"
_FIXED = struct.Struct("<4sBBBBQQIIQ")
_LENGTH = struct.Struct("<Q")
DIGEST_BYTES = 32
MAX_DIMS = 8

#: Element types a frame may carry, by their code on the wire.
DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)
_CODE = {dt: i for i, dt in enumerate(DTYPES)}
_NAMES = {str(dt).removeprefix("torch."): dt for dt in DTYPES}

# What a frame is for (``kind``).
EDGE, UP, DOWN = 1, 2, 3


class WireError(ValueError):
    """A frame that does not decode (bad magic, length, dtype, shape or digest)."""


@dataclass(frozen=True)
class Header:
    """A frame's header fields (see the module docstring)."""

    kind: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    round: int
    step: int
    sender: int
    receiver: int
    edge: int


@dataclass(frozen=True)
class Frame:
    header: Header
    data: torch.Tensor  # on the CPU, of ``header.dtype`` and ``header.shape``


def raw_bytes(t: torch.Tensor) -> bytes:
    """The bytes of ``t`` as stored (row-major, native little-endian), any dtype."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def encode(header: Header, data: torch.Tensor) -> bytes:
    """One frame: ``header`` (its dtype and shape must be ``data``'s), ``data``'s bytes, the digest."""
    if header.dtype not in _CODE:
        raise WireError(f"dtype {header.dtype} cannot travel (allowed: {', '.join(_NAMES)})")
    if tuple(data.shape) != header.shape or data.dtype != header.dtype or len(header.shape) > MAX_DIMS:
        raise WireError(
            f"header says {header.dtype}{list(header.shape)}, data is {data.dtype}{list(data.shape)}"
        )
    payload = raw_bytes(data)
    head = _FIXED.pack(
        MAGIC,
        header.kind,
        _CODE[header.dtype],
        len(header.shape),
        0,
        header.round,
        header.step,
        header.sender,
        header.receiver,
        header.edge,
    )
    head += struct.pack(f"<{len(header.shape)}Q", *header.shape) + _LENGTH.pack(len(payload))
    body = head + payload
    return body + hashlib.sha256(body).digest()


def decode_header(frame: bytes) -> tuple[Header, int]:
    """The header of ``frame`` and where its payload starts; :class:`WireError` when malformed."""
    if len(frame) < _FIXED.size + _LENGTH.size + DIGEST_BYTES:
        raise WireError(f"frame of {len(frame)} bytes is shorter than a header")
    magic, kind, code, ndim, _, round_, step, sender, receiver, edge = _FIXED.unpack_from(frame)
    if magic != MAGIC:
        raise WireError("not a frame of this protocol (bad magic)")
    if code >= len(DTYPES):
        raise WireError(f"unknown dtype code {code}")
    if ndim > MAX_DIMS:
        raise WireError(f"{ndim} dimensions (at most {MAX_DIMS})")
    at = _FIXED.size
    if len(frame) < at + 8 * ndim + _LENGTH.size + DIGEST_BYTES:
        raise WireError("frame shorter than its shape")
    shape = struct.unpack_from(f"<{ndim}Q", frame, at)
    at += 8 * ndim
    (length,) = _LENGTH.unpack_from(frame, at)
    at += _LENGTH.size
    dtype = DTYPES[code]
    if at + length + DIGEST_BYTES != len(frame):
        raise WireError(f"payload length {length} does not match the frame's {len(frame)} bytes")
    width = torch.empty((), dtype=dtype).element_size()
    if int(np.prod(shape, dtype=np.float64)) * width != length:
        raise WireError(f"payload of {length} bytes is not {dtype}{list(shape)}")
    return Header(kind, dtype, tuple(int(s) for s in shape), round_, step, sender, receiver, edge), at


def check_digest(frame: bytes) -> None:
    """:class:`WireError` unless the frame's last 32 bytes are the SHA-256 of the rest."""
    if hashlib.sha256(frame[:-DIGEST_BYTES]).digest() != frame[-DIGEST_BYTES:]:
        raise WireError("digest does not match the frame (altered on the way)")


def decode(frame: bytes) -> Frame:
    """A received frame, checked (header, lengths, digest); :class:`WireError` when it fails."""
    header, at = decode_header(frame)
    check_digest(frame)
    payload = bytearray(frame[at : len(frame) - DIGEST_BYTES])
    flat = torch.frombuffer(payload, dtype=torch.uint8) if payload else torch.empty(0, dtype=torch.uint8)
    return Frame(header, flat.view(header.dtype).reshape(header.shape))


def edge_tag(name: str, edges: np.ndarray) -> int:
    """What an edge frame carries, as 64 bits: the payload's name and its undirected edge ids in order."""
    h = hashlib.blake2b(digest_size=8)
    h.update(name.encode())
    h.update(np.ascontiguousarray(edges, dtype="<i8").tobytes())
    return int.from_bytes(h.digest(), "little")


def pack_tensors(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """Named tensors as one ``uint8`` tensor: an 8-byte table length, a JSON table of
    ``[name, dtype, shape, offset]``, then each tensor's bytes (:func:`unpack_tensors` reads it)."""
    table, parts, offset = [], [], 0
    for name, t in tensors.items():
        if t.dtype not in _CODE:
            raise WireError(f"tensor {name!r}: dtype {t.dtype} cannot travel")
        b = raw_bytes(t)
        table.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), offset])
        parts.append(b)
        offset += len(b)
    head = json.dumps(table).encode()
    blob = _LENGTH.pack(len(head)) + head + b"".join(parts)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)


def unpack_tensors(packed: torch.Tensor) -> dict[str, torch.Tensor]:
    """The tensors :func:`pack_tensors` packed; :class:`WireError` when the table does not fit."""
    blob = raw_bytes(packed)
    try:
        (n,) = _LENGTH.unpack_from(blob)
        table = json.loads(blob[8 : 8 + n])
        start, out = 8 + n, {}
        for name, dtype_name, shape, offset in table:
            dtype = _NAMES[dtype_name]
            width = torch.empty((), dtype=dtype).element_size()
            size = int(np.prod(shape, dtype=np.int64)) * width
            lo = start + int(offset)
            if lo < start or lo + size > len(blob):
                raise WireError(f"tensor {name!r} lies outside the packed bytes")
            raw = bytearray(blob[lo : lo + size])
            flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            out[str(name)] = flat.view(dtype).reshape(shape)
        return out
    except (struct.error, ValueError, KeyError, TypeError) as e:
        if isinstance(e, WireError):
            raise
        raise WireError(f"packed tensors do not decode: {e}") from None
