"""TLS for the admission webhook without cert-manager, and the webhook configuration's caBundle.

The operator keeps a CA and a serving certificate in a Secret in its own namespace
(``tls.crt``, ``tls.key``, ``ca.crt``, ``ca.key``, ``ca-bundle.crt``); every replica loads the same
Secret, so two replicas serve the same certificate and write the same caBundle (no fight). The
serving certificate is renewed ``renew_before`` ahead of expiry (the CA keeps signing), the CA
``ca_renew_before`` ahead of its own expiry; during a CA rollover ``ca-bundle.crt`` carries the new
and the previous CA. Concurrent writers are resolved by the API's optimistic concurrency (create
→ 409 → read the winner; replace with resourceVersion → 409 → read again).

``ensure_configuration`` creates the ValidatingWebhookConfiguration when it is missing and keeps
every gpushare entry's ``caBundle`` current; in local mode (a URL on 127.0.0.1) it also replaces
entries that differ from the desired ones. With cert-manager, mount its certificate and pass the
files instead (no Secret is written; cainjector keeps caBundle current).

The certificate maths is pure (functions taking ``now``); the API calls are the async functions.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare.admission.webhook_config import WebhookSettings, build_configuration
from gpushare.pki import CERT_VALIDITY, CertificateError, generate_ca, issue_serving_cert

RENEW_BEFORE = dt.timedelta(days=30)
CA_RENEW_BEFORE = dt.timedelta(days=365)

KEY_CERT, KEY_KEY, KEY_CA, KEY_CA_KEY, KEY_BUNDLE = "tls.crt", "tls.key", "ca.crt", "ca.key", "ca-bundle.crt"


#: The generated stubs do not list ``_content_type``; the client accepts it.
_JSON_PATCH: dict[str, Any] = {"_content_type": "application/json-patch+json"}


class WebhookCertError(Exception):
    """Certificates or the webhook configuration could not be ensured; the message says which and why."""


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


# --- pure certificate maths -----------------------------------------------------------------------


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
    files = CertFiles(directory / KEY_CERT, directory / KEY_KEY, directory / KEY_CA)
    changed = _write_atomic(files.keyfile, bundle.key, 0o600)
    changed = _write_atomic(files.cafile, bundle.ca_bundle, 0o644) or changed
    changed = _write_atomic(files.certfile, bundle.cert, 0o644) or changed
    return files, changed


# --- API side effects -----------------------------------------------------------------------------


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def ensure_certificates(
    api: client.ApiClient,
    namespace: str,
    secret_name: str,
    sans: Sequence[str],
    *,
    now: dt.datetime | None = None,
    renew_before: dt.timedelta = RENEW_BEFORE,
    ca_renew_before: dt.timedelta = CA_RENEW_BEFORE,
    validity: dt.timedelta = CERT_VALIDITY,
    attempts: int = 5,
) -> tuple[CertBundle, str | None]:
    """The valid bundle from the Secret, creating or renewing it. Returns ``(bundle, why_written)``."""
    core = client.CoreV1Api(api)
    when = now or _utcnow()
    last: Exception | None = None
    for _ in range(attempts):
        try:
            secret = await core.read_namespaced_secret(secret_name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise WebhookCertError(
                    f"cannot read Secret {namespace}/{secret_name}: {exc.status} {exc.reason}"
                ) from None
            secret = None
        current = bundle_from_secret_data(secret.data if secret is not None else None)
        problem = cert_problem(current, sans, when, renew_before, ca_renew_before)
        if problem is None and current is not None:
            return current, None
        fresh = renew(current, sans, when, ca_renew_before, validity)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": secret_name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/name": "gpushare-operator",
                    "app.kubernetes.io/component": "webhook",
                },
            },
            "data": secret_data(fresh),
        }
        try:
            if secret is None:
                await core.create_namespaced_secret(namespace, body)  # type: ignore[arg-type]
            else:
                body["metadata"]["resourceVersion"] = secret.metadata.resource_version
                await core.replace_namespaced_secret(secret_name, namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 409:  # another replica won: read its certificate
                last = exc
                continue
            raise WebhookCertError(
                f"cannot write Secret {namespace}/{secret_name}: {exc.status} {exc.reason}"
            ) from None
        return fresh, problem
    raise WebhookCertError(f"Secret {namespace}/{secret_name} kept changing under us: {last}")


def _ours(settings: WebhookSettings) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in build_configuration(settings)["webhooks"]}


async def ensure_configuration(api: client.ApiClient, settings: WebhookSettings, *, attempts: int = 5) -> str:
    """Create the ValidatingWebhookConfiguration or bring its gpushare entries up to date.

    Returns what happened: ``created``, ``patched`` or ``unchanged``. In Service mode only
    ``caBundle`` is written on existing entries (the shipped manifest's other fields are the
    administrator's); in local mode (``url_base``) differing entries are replaced entirely.
    """
    adm = client.AdmissionregistrationV1Api(api)
    desired = build_configuration(settings)
    try:
        found = await adm.read_validating_webhook_configuration(settings.name)
    except ApiException as exc:
        if exc.status != 404:
            raise WebhookCertError(
                f"cannot read ValidatingWebhookConfiguration {settings.name}: {exc.status} {exc.reason}"
            ) from None
        try:
            await adm.create_validating_webhook_configuration(desired)  # type: ignore[arg-type]
        except ApiException as exc2:
            if exc2.status == 409 and attempts > 1:
                return await ensure_configuration(api, settings, attempts=attempts - 1)
            raise WebhookCertError(
                f"cannot create ValidatingWebhookConfiguration {settings.name}: {exc2.status} {exc2.reason}"
            ) from None
        return "created"
    current: dict[str, Any] = api.sanitize_for_serialization(found)
    hooks = current.get("webhooks") or []
    ours = _ours(settings)
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": current["metadata"]["resourceVersion"]}
    ]
    seen = set()
    for index, hook in enumerate(hooks):
        want = ours.get(hook.get("name"))
        if want is None:
            continue
        seen.add(hook["name"])
        if settings.url_base is not None:
            if _comparable(hook) != _comparable(want):
                ops.append({"op": "replace", "path": f"/webhooks/{index}", "value": want})
        elif settings.ca_bundle and hook.get("clientConfig", {}).get("caBundle") != settings.ca_bundle:
            ops.append(
                {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": settings.ca_bundle}
            )
    if settings.url_base is not None:
        ops.extend({"op": "add", "path": "/webhooks/-", "value": h} for n, h in ours.items() if n not in seen)
    if len(ops) == 1:
        return "unchanged"
    try:
        await adm.patch_validating_webhook_configuration(settings.name, ops, **_JSON_PATCH)
    except ApiException as exc:
        if exc.status in (409, 422) and attempts > 1:  # resourceVersion moved (another replica)
            return await ensure_configuration(api, settings, attempts=attempts - 1)
        raise WebhookCertError(
            f"cannot patch ValidatingWebhookConfiguration {settings.name}: {exc.status} {exc.reason}"
        ) from None
    return "patched"


def _comparable(hook: Mapping[str, Any]) -> dict[str, Any]:
    """The fields we set, with the apiserver's defaults stripped, for comparison."""
    keys = (
        "name",
        "clientConfig",
        "rules",
        "failurePolicy",
        "timeoutSeconds",
        "namespaceSelector",
        "objectSelector",
        "sideEffects",
        "admissionReviewVersions",
        "matchPolicy",
        "matchConditions",
    )
    out = {k: hook.get(k) for k in keys}
    if out.get("namespaceSelector") == {}:
        out["namespaceSelector"] = None
    return out


async def delete_configuration(api: client.ApiClient, name: str) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    try:
        await adm.delete_validating_webhook_configuration(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
