"""The admission webhook's API side effects: its certificate Secret and its ValidatingWebhookConfiguration.

Nothing here decides anything (what to write and when comes from ``gpushare.webhook.lifecycle``).
Every request goes through ``gpushare.k8s.retry`` (backoff on 5xx/429/connection errors, counted in
``gpushare_api_errors_total`` / ``gpushare_api_writes_total``; 404 means absent). A write that lost
a race to another replica raises ``retry.Conflict`` (the caller reads again and decides again);
any other failure raises ``WebhookCertError`` with a one-line message naming the object.

RBAC (docs/security.md): the Secret get/create/update in the operator's namespace; the
configuration get/patch (create only where the manifests did not ship it, e.g. local mode).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpushare.k8s.client import ApiClient
from gpushare.k8s.rest import JSON_PATCH, ApiError, Rest, path
from gpushare.k8s.retry import CONFLICT, ApiUnavailable, Conflict, call, call_if_present, call_or_absent

SECRETS = "secrets"
CONFIGURATIONS = "validatingwebhookconfigurations"
CORE = "/api/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
SECRET_LABELS = {"app.kubernetes.io/name": "gpushare-operator", "app.kubernetes.io/component": "webhook"}


class WebhookCertError(Exception):
    """Certificates or the webhook configuration could not be ensured; the message says which and why."""


@dataclass(frozen=True)
class StoredSecret:
    """A Secret as read: its ``data`` (base64 values) and the resourceVersion to replace it at."""

    data: dict[str, str]
    resource_version: str
    labels: dict[str, str] = field(default_factory=dict)


def _failed(what: str, exc: ApiError) -> WebhookCertError:
    if isinstance(exc, ApiUnavailable):
        return WebhookCertError(f"cannot {what}: {exc}")
    return WebhookCertError(f"cannot {what}: {exc.status} {exc.reason}")


async def _write(
    what: str,
    fn: Callable[[], Awaitable[object]],
    *,
    verb: str,
    resource: str,
    conflicts: frozenset[int] = CONFLICT,
    not_found: str | None = None,
) -> None:
    """One write; a status in ``conflicts`` (lost a race) is ``Conflict``, any other failure
    ``WebhookCertError`` (worded ``not_found``, when given, for a 404)."""
    try:
        await call(fn, verb=verb, resource=resource, conflict_on=conflicts)
    except Conflict as exc:
        raise Conflict(str(_failed(what, exc)), exc.status, exc.reason, exc.body) from exc
    except ApiError as exc:
        failure = _failed(what, exc)
        if not_found is not None and exc.status == 404:
            failure = WebhookCertError(not_found)
        raise failure from None


async def read_secret(api: ApiClient, namespace: str, name: str) -> StoredSecret | None:
    """The Secret, or None when it does not exist."""
    url = path(CORE, "namespaces", namespace, "secrets", name)
    try:
        secret = await call_or_absent(lambda: Rest(api).get(url), verb="get", resource=SECRETS)
    except ApiError as exc:
        raise _failed(f"read Secret {namespace}/{name}", exc) from None
    if secret is None:
        return None
    meta = secret.get("metadata") or {}
    return StoredSecret(
        dict(secret.get("data") or {}), str(meta.get("resourceVersion") or ""), dict(meta.get("labels") or {})
    )


async def write_secret(
    api: ApiClient,
    namespace: str,
    name: str,
    data: Mapping[str, str],
    resource_version: str | None,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Create the TLS Secret (``resource_version`` None) or replace the version that was read;
    ``Conflict`` when another writer got there first. ``labels`` are added to ``SECRET_LABELS``.
    A create answered 404 means the namespace is missing, and the message says so."""
    rest = Rest(api)
    all_labels = {**(labels or {}), **SECRET_LABELS}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": meta,
        "data": dict(data),
    }
    what = f"write Secret {namespace}/{name}"
    if resource_version is None:
        missing = (
            f"cannot {what}: namespace {namespace} does not exist (kubectl create namespace {namespace})"
        )
        await _write(
            what,
            lambda: rest.create(path(CORE, "namespaces", namespace, "secrets"), body),
            verb="create",
            resource=SECRETS,
            not_found=missing,
        )
    else:
        await _write(
            what,
            lambda: rest.replace(path(CORE, "namespaces", namespace, "secrets", name), body),
            verb="update",
            resource=SECRETS,
        )


async def read_configuration(api: ApiClient, name: str) -> dict[str, Any] | None:
    """The ValidatingWebhookConfiguration as JSON, or None when it does not exist."""
    try:
        return await call_or_absent(
            lambda: Rest(api).get(path(ADMISSION, name)), verb="get", resource=CONFIGURATIONS
        )
    except ApiError as exc:
        raise _failed(f"read ValidatingWebhookConfiguration {name}", exc) from None


async def create_configuration(api: ApiClient, body: Mapping[str, Any]) -> None:
    """Create it; ``Conflict`` when another replica created it first."""
    await _write(
        f"create ValidatingWebhookConfiguration {body['metadata']['name']}",
        lambda: Rest(api).create(ADMISSION, body),
        verb="create",
        resource=CONFIGURATIONS,
    )


async def patch_configuration(api: ApiClient, name: str, ops: Sequence[Mapping[str, Any]]) -> None:
    """Apply a JSON patch whose first op tests the resourceVersion that was read; ``Conflict`` when
    it moved (409, or 422 from the failed test)."""
    await _write(
        f"patch ValidatingWebhookConfiguration {name}",
        lambda: Rest(api).patch(path(ADMISSION, name), [dict(op) for op in ops], content_type=JSON_PATCH),
        verb="patch",
        resource=CONFIGURATIONS,
        conflicts=frozenset({409, 422}),
    )


async def delete_configuration(api: ApiClient, name: str) -> None:
    """Delete it (nothing to do when it is already gone)."""
    await call_if_present(
        lambda: Rest(api).delete(path(ADMISSION, name)), verb="delete", resource=CONFIGURATIONS
    )


async def delete_secret(api: ApiClient, namespace: str, name: str) -> None:
    """Delete the Secret (nothing to do when it is already gone)."""
    url = path(CORE, "namespaces", namespace, "secrets", name)
    try:
        await call_if_present(lambda: Rest(api).delete(url), verb="delete", resource=SECRETS)
    except ApiError as exc:
        raise _failed(f"delete Secret {namespace}/{name}", exc) from None


async def namespace_exists(api: ApiClient, name: str) -> bool:
    """False only when the apiserver says the namespace does not exist (404); True when it exists or
    cannot be read (e.g. 403: in a pod the namespace is its own and exists; an unreachable
    apiserver: one attempt, the caller's own retries report it)."""
    try:
        url = path(CORE, "namespaces", name)
        found = await call_or_absent(
            lambda: Rest(api).get(url), verb="get", resource="namespaces", attempts=1
        )
    except ApiError:
        return True
    return found is not None
