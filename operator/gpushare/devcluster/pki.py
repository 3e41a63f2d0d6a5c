"""Certificates and keys for the local control plane (``cryptography``, no openssl binary).

A throw-away CA signs serving certificates whose SANs name 127.0.0.1 and localhost
(Go ignores the CN); the same helpers serve admission webhooks in tests.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpushare.pki import generate_ca, issue_serving_cert, key_pem

_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)


def make_ca(common_name: str = "gpushare-devcluster-ca") -> KeyPair:
    """A self-signed CA (P-256)."""
    return KeyPair(*generate_ca(dt.datetime.now(dt.UTC), common_name, _VALIDITY))


def make_serving_cert(
    ca: KeyPair,
    common_name: str = "127.0.0.1",
    *,
    ips: tuple[str, ...] = ("127.0.0.1",),
    dns_names: tuple[str, ...] = ("localhost",),
) -> KeyPair:
    """A TLS serving certificate signed by ``ca`` with IP/DNS SANs (default 127.0.0.1, localhost)."""
    cert, key = issue_serving_cert(
        ca.cert_pem, ca.key_pem, [*ips, *dns_names], dt.datetime.now(dt.UTC), _VALIDITY, common_name
    )
    return KeyPair(cert, key)


def make_service_account_keys() -> KeyPair:
    """RSA key pair for signing service-account tokens: (public key PEM, private key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(pub, key_pem(key))
