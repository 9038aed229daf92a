"""The admission webhook's certificates: a serving certificate signed by a CA of its own, renewed in time.

Pure functions over PEM bytes with the time passed in. The operator keeps the result in a Secret shared
by its replicas (``webhook.py``). The CA is made for one serving certificate and its private key is
dropped as soon as that certificate is signed: it is never stored, so nothing that reads the Secret (or a
backup of etcd) can mint a certificate the API server would trust. Each renewal makes a new CA; the API
server trusts every CA in ``ca_bundle``, so the new one is introduced beside the old one, which leaves
only when it expires: a rotation never breaks a request in flight.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVING_VALIDITY = timedelta(days=90)
CA_VALIDITY = SERVING_VALIDITY
"""A CA signs one serving certificate and lives as long as it. A CA that lived longer (before 0.2, when
the CA's key was kept in the Secret) is no longer trusted once a renewal runs."""
RENEW_SERVING_BEFORE = timedelta(days=30)
CLOCK_SKEW = timedelta(minutes=5)
"""Certificates are valid from a little before ``now``, for API servers whose clock is behind."""


@dataclass(frozen=True)
class TLSBundle:
    """What the Secret holds: the CAs the API server trusts and the serving pair (no CA key)."""

    ca_bundle: bytes
    """PEM of every CA still trusted, the one that signed ``cert`` first."""
    cert: bytes
    key: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "scavenger"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def new_ca(now: datetime) -> tuple[bytes, bytes]:
    """A self-signed CA certificate and its key, as PEM."""
    key = _new_key()
    name = _name(f"scavenger webhook CA {now:%Y-%m-%d %H:%M:%S}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue(ca_cert: bytes, ca_key: bytes, hosts: Sequence[str], now: datetime) -> tuple[bytes, bytes]:
    """A serving certificate for ``hosts`` (DNS names or addresses) signed by the CA, and its key."""
    if not hosts:
        raise ValueError("a serving certificate needs at least one host")
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    key = _new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0])).issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(min(now + SERVING_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([_san(host) for host in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _hosts_of(cert: x509.Certificate) -> set[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(name.value) for name in names if isinstance(name, x509.DNSName | x509.IPAddress)}


def _usable(bundle: TLSBundle, hosts: Sequence[str], now: datetime) -> bool:
    """Whether the serving certificate can keep serving ``hosts``, trusted through the bundle's first CA."""
    try:
        cas = x509.load_pem_x509_certificates(bundle.ca_bundle)
        serving = x509.load_pem_x509_certificate(bundle.cert)
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except ValueError:
        return False
    return (
        bool(cas)
        and _same_key(serving.public_key(), key.public_key())
        and _signed_by(serving, cas[0])
        and serving.not_valid_after_utc - now > RENEW_SERVING_BEFORE
        and _hosts_of(serving) == {str(_san(host).value) for host in hosts}
    )


def _same_key(one: Any, other: Any) -> bool:
    encoding, form = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return bool(one.public_bytes(encoding, form) == other.public_bytes(encoding, form))


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def renewal_due(bundle: TLSBundle | None, hosts: Sequence[str], now: datetime) -> bool:
    """Whether the bundle must be (re)made: missing, unreadable, expiring, or for other hosts."""
    return bundle is None or not _usable(bundle, hosts, now)


def renew(bundle: TLSBundle | None, hosts: Sequence[str], now: datetime) -> TLSBundle:
    """The bundle to store: the same one when still good, else a fresh serving certificate signed by a new
    CA whose key is then forgotten; the old bundle's CAs stay trusted until they expire (a replica that
    has not reloaded yet still serves a certificate of one of them)."""
    if bundle is not None and not renewal_due(bundle, hosts, now):
        return bundle
    ca_cert, ca_key = new_ca(now)
    cert, key = issue(ca_cert, ca_key, hosts, now)
    still_valid = _still_trusted(bundle.ca_bundle, now) if bundle is not None else b""
    return TLSBundle(ca_bundle=ca_cert + still_valid, cert=cert, key=key)


def _still_trusted(pems: bytes, now: datetime) -> bytes:
    """The CAs of ``pems`` that have not expired and live no longer than `CA_VALIDITY` (a longer-lived one
    is of the time its key was stored; unreadable input counts as none)."""
    try:
        cas = x509.load_pem_x509_certificates(pems)
    except ValueError:
        return b""
    return b"".join(ca.public_bytes(serialization.Encoding.PEM) for ca in cas
                    if ca.not_valid_after_utc > now
                    and ca.not_valid_after_utc - ca.not_valid_before_utc <= CA_VALIDITY + CLOCK_SKEW)


def not_after(cert: bytes) -> datetime:
    """When a PEM certificate expires."""
    return x509.load_pem_x509_certificate(cert).not_valid_after_utc
