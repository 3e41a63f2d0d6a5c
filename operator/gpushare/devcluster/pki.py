"""Certificates and keys for the local control plane (``cryptography``, no openssl binary).

A throw-away CA signs serving certificates whose SANs name 127.0.0.1 and localhost
(Go ignores the CN); the same helpers serve admission webhooks in tests.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def make_client_cert(ca: KeyPair, common_name: str, organizations: tuple[str, ...] = ()) -> KeyPair:
    """A TLS client certificate (CN = user, O = groups) signed by ``ca``: the apiserver's identity
    towards a real node's kubelet (``--kubelet-client-certificate``)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC private key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([*names, x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + _VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))
