"""Downloading the paper's public datasets (Appendix "Additional Details on Datasets") with urllib.

Each file is streamed to a temporary file in the destination folder, its length is checked against
the ``Content-Length`` the server announced (a body cut short, or longer, is refused) and its SHA-256
against :data:`SOURCES` *before* it is moved into place; it is deleted on a mismatch, and a
destination folder the failed fetch created is removed again. Where no official
checksum is known (``sha256=None``) the download is kept, its SHA-256 is printed, and the caller is
told to check it (or to pass ``sha256=`` explicitly). Archives are unpacked after the check.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .base import DatasetError


@dataclass(frozen=True)
class Source:
    filename: str
    url: str | None
    sha256: str | None  # None: no official checksum known
    note: str = ""
    unpack: bool = False  # .tar.gz / .zip: unpack into the destination after the check


SOURCES: dict[str, list[Source]] = {
    "school": [
        Source(
            "school.mat",
            "https://raw.githubusercontent.com/jiayuzhou/MALSAR/fb9751594983df020ddc4f7e4a40520ee7c37989/data/school.mat",
            "57fb3238fdd03a9aa17276e2ce18d9bbb5d128c3261e794fe6233b58b6909068",
            "MALSAR sample data (GPL repository); checksum as in data/DATA.md",
        )
    ],
    "rmnist": [
        Source(
            "mnist.npz",
            "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz",
            "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
            "Keras copy of MNIST; checksum from keras.datasets.mnist (differs from the PNG-rebuilt "
            "mnist.npz of data/DATA.md, whose arrays are the same digits)",
        )
    ],
    "hcifar10": [
        Source(
            "cifar-10-python.tar.gz",
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
            "official archive (md5 c58f30108f718f92721af3b95e74349a on the CIFAR page)",
            unpack=True,
        )
    ],
    "har": [
        Source(
            "human+activity+recognition+using+smartphones.zip",
            "https://archive.ics.uci.edu/static/public/240/human+activity+recognition+using+smartphones.zip",
            None,
            "UCI repository; no official checksum published -- check the printed SHA-256",
            unpack=True,
        )
    ],
    "vehicle": [
        Source(
            "vehicle.mat",
            "https://raw.githubusercontent.com/abdulmomen-ghalkha/WirelessSheaves/main/Datasets/vehicle.mat",
            None,
            "MOCHA's federated Vehicle Sensor file as mirrored by a Sheaf-FMTL repository; no official "
            "checksum known",
        )
    ],
    "gleam": [
        Source(
            "gleam.mat",
            None,
            None,
            "no public MOCHA-format gleam.mat address is known; pass --url to a copy you trust",
        )
    ],
}


def download(url: str, dest: Path, expected_sha256: str | None, timeout: float = 60.0) -> str:
    """Stream ``url`` to ``dest`` via a temp file; verify the length the server announced and the
    SHA-256 (when known) before ``os.replace``. Returns the SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        h, got = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            announced = _announced_length(resp)
            if announced is not None:  # read to the end of the connection (urllib asks the server
                resp.length = None  # to close it), so a body longer than announced is seen too
            for block in iter(lambda: resp.read(1 << 20), b""):
                h.update(block)
                out.write(block)
                got += len(block)
        if announced is not None and got != announced:
            how = "cut short" if got < announced else "longer than announced"
            raise DatasetError(
                f"{dest.name} from {url}: the server announced {announced} bytes (Content-Length) but sent "
                f"{got} ({how}); the download was deleted, nothing was installed"
            )
        digest = h.hexdigest()
        if expected_sha256 is not None and digest != expected_sha256.lower():
            raise DatasetError(
                f"{dest.name} from {url}: SHA-256 {digest} does not match the expected {expected_sha256}; "
                "the download was deleted"
            )
        os.replace(tmp, dest)
        return digest
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise DatasetError(f"{dest.name}: download from {url} failed ({e})") from e
    finally:
        tmp.unlink(missing_ok=True)


def _announced_length(resp: object) -> int | None:
    """The body length an HTTP response announced (``None``: none, or a chunked or compressed one)."""
    if not isinstance(resp, http.client.HTTPResponse) or resp.chunked:
        return None
    if resp.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None
    return resp.length


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack a .tar.gz or .zip (and a .zip nested in it, as UCI HAR ships) refusing unsafe paths."""
    root = dest.resolve()

    def safe(name: str) -> None:
        target = (dest / name).resolve()
        if root != target and root not in target.parents:
            raise DatasetError(f"{archive}: member {name!r} would be written outside {dest}")

    try:
        if archive.name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(archive) as tf:
                for m in tf.getmembers():
                    safe(m.name)
                    if not (m.isfile() or m.isdir()):
                        raise DatasetError(f"{archive}: member {m.name!r} is not a plain file or folder")
                tf.extractall(dest, filter="data")
        elif archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    safe(name)
                zf.extractall(dest)
                inner = [n for n in zf.namelist() if n.endswith(".zip") and "/" not in n.strip("/")]
            for name in inner:
                _unpack(dest / name, dest)
                (dest / name).unlink()
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise DatasetError(f"{archive}: cannot unpack ({type(e).__name__}: {e})") from e


def fetch(
    name: str,
    dest: Path,
    url: str | None = None,
    sha256: str | None = None,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Download dataset ``name`` into ``dest``; ``url``/``sha256`` override the table's first file."""
    if name not in SOURCES:
        raise DatasetError(f"no download known for {name!r}; known: {', '.join(sorted(SOURCES))}")
    made = [p for p in [dest, *dest.parents] if not p.exists()]  # removed again when the fetch fails
    try:
        return _fetch_all(name, dest, url, sha256, log)
    except BaseException:
        with contextlib.suppress(OSError):  # (stops at the first folder not empty)
            for p in made:
                p.rmdir()
        raise


def _fetch_all(
    name: str, dest: Path, url: str | None, sha256: str | None, log: Callable[[str], None]
) -> list[Path]:
    out = []
    for k, src in enumerate(SOURCES[name]):
        the_url = url if (url and k == 0) else src.url
        expected = (sha256 if k == 0 else None) or src.sha256
        if the_url is None:
            raise DatasetError(f"{name}: {src.filename}: {src.note}")
        target = dest / src.filename
        log(f"{name}: downloading {the_url} -> {target}")
        digest = download(the_url, target, expected)
        if expected is None:
            log(f"{name}: WARNING no official SHA-256 known for {src.filename}; got {digest} -- check it")
        else:
            log(f"{name}: SHA-256 verified ({digest})")
        if src.unpack:
            _unpack(target, dest)
            log(f"{name}: unpacked {target.name} into {dest}")
        out.append(target)
    return out
