"""Certificate maths (pure; ``now`` passed in): a small EC CA and serving certificates it signs.

Used by the webhook's own certificates (``gpushare.webhook.tls``) and by the local control
plane (``gpushare.devcluster.pki``). Go checks SANs, never the CN, so every serving certificate
names its IPs and DNS names as SANs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_VALIDITY = dt.timedelta(days=365)
CA_VALIDITY = dt.timedelta(days=3650)
#: Certificates start a little in the past, so clocks slightly behind still accept them.
BACKDATE = dt.timedelta(minutes=5)


class CertificateError(ValueError):
    """A key or certificate that cannot be used (e.g. a CA key that is not an EC key)."""


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_ca(
    now: dt.datetime, common_name: str = "gpushare-ca", validity: dt.timedelta = CA_VALIDITY
) -> tuple[bytes, bytes]:
    """A self-signed P-256 CA that may sign leaf certificates only: (cert PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)


def san_entries(sans: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for san in sans:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            out.append(x509.DNSName(san))
    return out


def issue_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    sans: Sequence[str],
    now: dt.datetime,
    validity: dt.timedelta = CERT_VALIDITY,
    common_name: str | None = None,
) -> tuple[bytes, bytes]:
    """A TLS serving certificate for ``sans`` (DNS names and IPs), signed by the CA, never outliving it."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertificateError("the CA key is not an EC private key")
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    cn = common_name or (sans[0] if sans else "gpushare")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(san_entries(sans)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)
