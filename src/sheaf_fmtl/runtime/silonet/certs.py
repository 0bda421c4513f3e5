"""The federation's own certificate authority and one key and certificate per silo
(``sheaf-fmtl certs init --clients N --out DIR``), and a silo's reading of its own.

``DIR/ca.pem`` and ``DIR/ca.key`` are the authority (keep the key off the silos' machines);
``DIR/silo-R/`` holds what silo ``R`` needs and nothing else: ``cert.pem`` (subject and DNS name
``silo-R``, the silo's identity, checked against the graph on every connection), ``key.pem`` and a
copy of ``ca.pem``. Keys are EC P-256, written with mode 0600. A silo's folder is read by
:func:`load_identity`, which refuses a key others may read, a certificate of another silo, and one
the authority did not issue.
"""

from __future__ import annotations

import datetime
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ...config import ConfigError

PREFIX = "silo-"
KEY_MODE = 0o600


def silo_name(rank: int) -> str:
    """The identity of silo ``rank``: its certificate's subject common name and DNS name."""
    return f"{PREFIX}{rank}"


def silo_rank(name: str) -> int | None:
    """The rank an identity names (``silo-3`` -> 3), ``None`` when it names no silo."""
    digits = name.removeprefix(PREFIX)
    return (
        int(digits) if name.startswith(PREFIX) and digits.isdigit() and str(int(digits)) == digits else None
    )


@dataclass(frozen=True)
class Identity:
    """What one silo presents and checks: the authority's certificate, its own, and its key (PEM)."""

    rank: int
    ca: bytes
    cert: bytes
    key: bytes


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.chmod(path, KEY_MODE)  # (a umask cannot widen it, but an inherited ACL is not ours to keep)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    days: int,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name = _name(subject) if issuer is None else issuer[0].subject
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if issuer is None:  # the authority
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        usage = dict(key_cert_sign=True, crl_sign=True, digital_signature=False)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        usage = dict(key_cert_sign=False, crl_sign=False, digital_signature=True)
    builder = builder.add_extension(
        x509.KeyUsage(
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
            **usage,
        ),
        critical=True,
    )
    builder = builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
    )
    issuer_key = key.public_key() if issuer is None else issuer[1].public_key()
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
    )
    signer = key if issuer is None else issuer[1]
    return builder.sign(signer, hashes.SHA256())


def init_certs(out: Path, silos: int, days: int = 365) -> list[Path]:
    """An authority and ``silos`` silo identities under ``out`` (see the module docstring); the
    files written. Refuses (``ValueError``, one line) a folder that already holds an authority."""
    if silos < 1:
        raise ValueError(f"--clients {silos}: give the number of silos, at least 1")
    if days < 1:
        raise ValueError(f"--days {days}: certificates must be valid for at least 1 day")
    if (out / "ca.key").exists() or (out / "ca.pem").exists():
        raise ValueError(f"{out} already holds an authority (ca.pem); choose another --out or remove it")
    out.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("sheaf-fmtl federation authority", ca_key, None, days)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    written = [out / "ca.key", out / "ca.pem"]
    _write_key(out / "ca.key", ca_key)
    (out / "ca.pem").write_bytes(ca_pem)
    for rank in range(silos):
        folder = out / silo_name(rank)
        folder.mkdir(exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(silo_name(rank), key, (ca, ca_key), days)
        _write_key(folder / "key.pem", key)
        (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / "ca.pem").write_bytes(ca_pem)
        written += [folder / "key.pem", folder / "cert.pem", folder / "ca.pem"]
    return written


def certificate_identity(cert: x509.Certificate) -> str:
    """A certificate's subject common name (``""`` without one)."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def load_identity(folder: Path, rank: int) -> Identity:
    """Silo ``rank``'s identity from ``folder/silo-R/`` (``tls_certs``); ConfigError, one line, when a
    file is missing, the key is readable by others, or the certificate is not silo ``rank``'s or not
    issued by the folder's authority."""
    where = folder / silo_name(rank)
    paths = {name: where / f"{name}.pem" for name in ("ca", "cert", "key")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ConfigError(
            f"config key 'tls_certs' = {folder}: silo {rank} needs {', '.join(missing)} "
            f"(sheaf-fmtl certs init --clients N --out DIR writes them)"
        )
    mode = stat.S_IMODE(paths["key"].stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"config key 'tls_certs': {paths['key']} may be read by others (mode {mode:o}); "
            f"chmod 600 {paths['key']}"
        )
    raw = {name: p.read_bytes() for name, p in paths.items()}
    try:
        ca = x509.load_pem_x509_certificate(raw["ca"])
        cert = x509.load_pem_x509_certificate(raw["cert"])
        serialization.load_pem_private_key(raw["key"], password=None)
    except ValueError as e:
        raise ConfigError(f"config key 'tls_certs': {where} holds a file that is not PEM: {e}") from None
    if certificate_identity(cert) != silo_name(rank):
        raise ConfigError(
            f"config key 'tls_certs': {paths['cert']} is {certificate_identity(cert)!r}'s certificate, "
            f"not {silo_name(rank)!r}'s"
        )
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as e:  # another issuer, a bad signature
        raise ConfigError(
            f"config key 'tls_certs': {paths['cert']} was not issued by {paths['ca']} ({type(e).__name__})"
        ) from None
    return Identity(rank, raw["ca"], raw["cert"], raw["key"])
