"""The webhook's certificate maths (pure: functions take ``now``) and its certificate files.

The operator keeps a CA and a serving certificate in a Secret in its own namespace
(``tls.crt``, ``tls.key``, ``ca.crt``, ``ca.key``, ``ca-bundle.crt``). The serving certificate is
renewed ``renew_before`` ahead of expiry (the CA keeps signing), the CA ``ca_renew_before`` ahead of
its own expiry; during a CA rollover ``ca-bundle.crt`` carries the new and the previous CA.
``gpushare.webhook.lifecycle`` decides with these functions; ``gpushare.k8s.webhook_api`` reads
and writes the Secret.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpushare.admission.webhook_config import WebhookSettings
from gpushare.k8s.webhook_api import WebhookCertError
from gpushare.pki import CERT_VALIDITY, CertificateError, generate_ca, issue_serving_cert

RENEW_BEFORE = dt.timedelta(days=30)
CA_RENEW_BEFORE = dt.timedelta(days=365)

KEY_CERT, KEY_KEY, KEY_CA, KEY_CA_KEY, KEY_BUNDLE = "tls.crt", "tls.key", "ca.crt", "ca.key", "ca-bundle.crt"


@dataclass(frozen=True)
class CertBundle:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    #: The CAs clients should trust (the current CA, plus the previous one during a rollover).
    ca_bundle: bytes

    @property
    def ca_bundle_b64(self) -> str:
        return base64.b64encode(self.ca_bundle).decode("ascii")


@dataclass(frozen=True)
class CertFiles:
    certfile: Path
    keyfile: Path
    cafile: Path

    @classmethod
    def under(cls, directory: Path) -> CertFiles:
        """``tls.crt``, ``tls.key`` and ``ca.crt`` in ``directory``."""
        return cls(directory / KEY_CERT, directory / KEY_KEY, directory / KEY_CA)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _sans_of(cert: x509.Certificate) -> set[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v) for v in ext.get_values_for_type(x509.DNSName)} | {
        str(v) for v in ext.get_values_for_type(x509.IPAddress)
    }


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature is not a ValueError
        return False
    return True


def cert_problem(
    bundle: CertBundle | None,
    sans: Sequence[str],
    now: dt.datetime,
    renew_before: dt.timedelta = RENEW_BEFORE,
    ca_renew_before: dt.timedelta = CA_RENEW_BEFORE,
) -> str | None:
    """Why ``bundle`` must be replaced (missing, unreadable, expiring, wrong SANs, not signed by the CA)."""
    if bundle is None:
        return "no certificate yet"
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        cert = x509.load_pem_x509_certificate(bundle.cert)
        serialization.load_pem_private_key(bundle.key, password=None)
        serialization.load_pem_private_key(bundle.ca_key, password=None)
    except ValueError as exc:
        return f"unreadable certificate or key: {exc}"
    if ca.not_valid_after_utc - now < ca_renew_before:
        return f"the CA expires at {ca.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    if cert.not_valid_after_utc - now < renew_before:
        return f"the serving certificate expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    missing = set(sans) - _sans_of(cert)
    if missing:
        return f"the serving certificate lacks SANs {sorted(missing)}"
    if not _signed_by(cert, ca):
        return "the serving certificate is not signed by the CA"
    return None


def renew(
    old: CertBundle | None,
    sans: Sequence[str],
    now: dt.datetime,
    ca_renew_before: dt.timedelta = CA_RENEW_BEFORE,
    validity: dt.timedelta = CERT_VALIDITY,
) -> CertBundle:
    """A valid bundle for ``sans``: keep the CA while it is good, else a new CA (old one still trusted)."""
    ca_cert, ca_key, previous = None, None, b""
    if old is not None:
        try:
            ca = x509.load_pem_x509_certificate(old.ca_cert)
            serialization.load_pem_private_key(old.ca_key, password=None)
        except ValueError:
            ca = None
        if ca is not None:
            if ca.not_valid_after_utc - now >= ca_renew_before:
                ca_cert, ca_key = old.ca_cert, old.ca_key
            elif ca.not_valid_after_utc > now:
                previous = old.ca_cert  # still trusted until it expires
    if ca_cert is None or ca_key is None:
        ca_cert, ca_key = generate_ca(now, "gpushare-webhook-ca")
    try:
        cert, key = issue_serving_cert(ca_cert, ca_key, sans, now, validity)
    except CertificateError as exc:
        raise WebhookCertError(f"ca.key: {exc}") from None
    bundle = ca_cert if not previous or previous == ca_cert else ca_cert + previous
    return CertBundle(ca_cert=ca_cert, ca_key=ca_key, cert=cert, key=key, ca_bundle=bundle)


def bundle_from_secret_data(data: Mapping[str, str] | None) -> CertBundle | None:
    """The bundle stored in a Secret's ``data`` (base64 values), or None when incomplete."""
    if not data:
        return None
    try:
        raw = {k: base64.b64decode(v) for k, v in data.items()}
    except (ValueError, TypeError):
        return None
    if not all(k in raw for k in (KEY_CERT, KEY_KEY, KEY_CA, KEY_CA_KEY)):
        return None
    return CertBundle(
        ca_cert=raw[KEY_CA],
        ca_key=raw[KEY_CA_KEY],
        cert=raw[KEY_CERT],
        key=raw[KEY_KEY],
        ca_bundle=raw.get(KEY_BUNDLE) or raw[KEY_CA],
    )


def secret_data(bundle: CertBundle) -> dict[str, str]:
    raw = {
        KEY_CERT: bundle.cert,
        KEY_KEY: bundle.key,
        KEY_CA: bundle.ca_cert,
        KEY_CA_KEY: bundle.ca_key,
        KEY_BUNDLE: bundle.ca_bundle,
    }
    return {k: base64.b64encode(v).decode("ascii") for k, v in raw.items()}


def not_after(cert_pem: bytes) -> dt.datetime:
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def serving_sans(settings: WebhookSettings, extra: Sequence[str] = ()) -> list[str]:
    """SANs for the serving certificate: 127.0.0.1/localhost in local mode, else the Service's names."""
    if settings.url_base is not None:
        base = ["127.0.0.1", "localhost"]
    else:
        svc, ns = settings.service, settings.namespace
        base = [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local", f"{svc}.{ns}", svc]
    return list(dict.fromkeys([*base, *extra]))


def _write_atomic(path: Path, data: bytes, mode: int) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def write_files(bundle: CertBundle, directory: Path) -> tuple[CertFiles, bool]:
    """Write tls.crt/tls.key/ca.crt for the webhook server; True when any file changed.

    The key is written first and the certificate last, so a server reloading on change sees a
    matching pair.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = CertFiles.under(directory)
    changed = _write_atomic(files.keyfile, bundle.key, 0o600)
    changed = _write_atomic(files.cafile, bundle.ca_bundle, 0o644) or changed
    changed = _write_atomic(files.certfile, bundle.cert, 0o644) or changed
    return files, changed
