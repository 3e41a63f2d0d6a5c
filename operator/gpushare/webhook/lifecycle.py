"""The webhook certificate's lifecycle: create, renew, serve, and keep the caBundle current.

Without cert-manager the operator keeps its CA and serving certificate in a Secret in its own
namespace (``gpushare.webhook.tls``); every replica loads the same Secret, so two replicas serve
the same certificate and write the same caBundle (no fight). Concurrent writers are resolved by
the API's optimistic concurrency: a write that loses (create → 409; replace or JSON-patch at the
resourceVersion read → 409/422) raises ``Conflict`` and ``retry.replan`` reads and decides again.

``ensure_configuration`` creates the ValidatingWebhookConfiguration when it is missing and keeps
every gpushare entry's ``caBundle`` current; in local mode (a URL on 127.0.0.1) it also replaces
entries that differ from the desired ones. With cert-manager, mount its certificate and pass the
files instead (no Secret is written; cainjector keeps caBundle current).

``CertLifecycle`` ties it to the server's hooks: ``prepare`` (before the first bind),
``on_listening`` (after every bind) and ``background`` (the periodic renewal check). In local mode
(``gpushare run --webhook-local``, development) the Secret and the configuration it creates carry
the label ``gpushare.io/local-run: "true"``, and ``remove_local`` (the webhook's cleanup handler,
on SIGINT/SIGTERM) deletes them again, so that a stopped development run leaves nothing that
blocks a GPU job (a configuration pointing at a closed port) or a later ``helm install`` (a Secret
without Helm's ownership metadata). Objects it did not create (e.g. the chart's) are never deleted.
The API calls are in ``gpushare.k8s.webhook_api``; the decisions are here and in ``gpushare.webhook.tls``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpushare.admission.gate import gate_of
from gpushare.admission.webhook_config import (
    TARGETS,
    WebhookSettings,
    build_configuration,
    build_webhook,
    webhook_name,
)
from gpushare.k8s import ApiUnavailable, Conflict, webhook_api
from gpushare.k8s.client import ApiClient
from gpushare.k8s.retry import REPLAN_BACKOFF, Backoff, persist, replan
from gpushare.k8s.webhook_api import WebhookCertError
from gpushare.pki import CERT_VALIDITY
from gpushare.webhook.options import WebhookOptions
from gpushare.webhook.tls import (
    CA_RENEW_BEFORE,
    RENEW_BEFORE,
    CertBundle,
    CertFiles,
    bundle_from_secret_data,
    cert_problem,
    renew,
    secret_data,
    serving_sans,
    utcnow,
    write_files,
)

logger = logging.getLogger("gpushare.webhook")

#: Preparing the certificate before the first bind: the apiserver may still be starting.
PREPARE_BACKOFF = Backoff(attempts=30, base_delay=0.5, max_delay=10.0)
#: Registering the configuration after a bind (not fatal: the periodic check tries again).
REGISTER_BACKOFF = Backoff(attempts=5, base_delay=0.5, max_delay=10.0)
#: What a failed certificate or configuration step raises (the hooks retry or log these).
FAILURES: tuple[type[Exception], ...] = (WebhookCertError, ApiUnavailable, OSError)
#: The label on the Secret and configuration a local (development) run created; ``remove_local``
#: deletes only objects that carry it.
LOCAL_LABEL = "gpushare.io/local-run"
LOCAL_LABELS: Mapping[str, str] = {LOCAL_LABEL: "true"}


# --- decisions over the API (read, decide, write; again on Conflict) -------------------------------


async def ensure_certificates(
    api: ApiClient,
    namespace: str,
    secret_name: str,
    sans: Sequence[str],
    *,
    now: dt.datetime | None = None,
    renew_before: dt.timedelta = RENEW_BEFORE,
    ca_renew_before: dt.timedelta = CA_RENEW_BEFORE,
    validity: dt.timedelta = CERT_VALIDITY,
    backoff: Backoff = REPLAN_BACKOFF,
    labels: Mapping[str, str] | None = None,
) -> tuple[CertBundle, str | None]:
    """The valid bundle from the Secret, creating or renewing it. Returns ``(bundle, why_written)``.
    ``labels`` go on a Secret this creates; a renewal keeps the labels the Secret has."""
    when = now or utcnow()

    async def step() -> tuple[CertBundle, str | None]:
        stored = await webhook_api.read_secret(api, namespace, secret_name)
        current = bundle_from_secret_data(stored.data if stored is not None else None)
        problem = cert_problem(current, sans, when, renew_before, ca_renew_before)
        if problem is None and current is not None:
            return current, None
        fresh = renew(current, sans, when, ca_renew_before, validity)
        version = stored.resource_version if stored is not None else None
        keep = stored.labels if stored is not None else labels
        await webhook_api.write_secret(api, namespace, secret_name, secret_data(fresh), version, keep)
        return fresh, problem

    try:  # another replica won: read its certificate
        return await replan(step, what=f"Secret {namespace}/{secret_name}", backoff=backoff)
    except Conflict as exc:
        raise WebhookCertError(str(exc)) from None


def configuration_patch(current: Mapping[str, Any], settings: WebhookSettings) -> list[dict[str, Any]]:
    """The JSON patch bringing ``current``'s gpushare entries up to date; [] when they are.

    The first op tests the resourceVersion that was read. In Service mode only ``caBundle`` is
    written on existing entries (the shipped manifest's other fields are the administrator's); in
    local mode (``url_base``) differing entries are replaced and missing ones added, each with the
    NVIDIA gate as it found it (open or closed by the operator: ``gpushare.admission.gate``).
    """
    ours = {h["name"]: h for h in build_configuration(settings)["webhooks"]}
    targets = {webhook_name(t.handler_id): t for t in settings.targets or TARGETS}
    ops: list[dict[str, Any]] = []
    seen = set()
    for index, hook in enumerate(current.get("webhooks") or []):
        want = ours.get(hook.get("name"))
        if want is None:
            continue
        seen.add(hook["name"])
        if settings.url_base is not None:
            if gate_of(hook, targets[hook["name"]]):  # the operator's to open and close
                want = build_webhook(settings, targets[hook["name"]], nvidia_gate=True)
            if _comparable(hook) != _comparable(want):
                ops.append({"op": "replace", "path": f"/webhooks/{index}", "value": want})
        elif settings.ca_bundle and hook.get("clientConfig", {}).get("caBundle") != settings.ca_bundle:
            ops.append(
                {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": settings.ca_bundle}
            )
    if settings.url_base is not None:
        ops.extend({"op": "add", "path": "/webhooks/-", "value": h} for n, h in ours.items() if n not in seen)
    if not ops:
        return []
    version = current["metadata"]["resourceVersion"]
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *ops]


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


async def ensure_configuration(
    api: ApiClient, settings: WebhookSettings, *, backoff: Backoff = REPLAN_BACKOFF
) -> str:
    """Create the ValidatingWebhookConfiguration or bring its gpushare entries up to date
    (``configuration_patch``). Returns what happened: ``created``, ``patched`` or ``unchanged``."""

    async def step() -> str:
        current = await webhook_api.read_configuration(api, settings.name)
        if current is None:
            body = build_configuration(settings)
            if settings.url_base is not None:  # local mode: ours to delete on exit (remove_local)
                body["metadata"]["labels"].update(LOCAL_LABELS)
            await webhook_api.create_configuration(api, body)
            return "created"
        ops = configuration_patch(current, settings)
        if not ops:
            return "unchanged"
        await webhook_api.patch_configuration(api, settings.name, ops)
        return "patched"

    try:  # another replica moved it: read again
        return await replan(step, what=f"ValidatingWebhookConfiguration {settings.name}", backoff=backoff)
    except Conflict as exc:
        raise WebhookCertError(str(exc)) from None


# --- the lifecycle over the server's life ----------------------------------------------------------


class CertLifecycle:
    """The serving certificate and the caBundle, from before the first bind to shutdown.

    * mounted files (``options.cert_files_dir``, cert-manager): served as they are; the caBundle
      is their ``ca.crt``; no Secret is read or written;
    * otherwise the Secret is ensured (created, renewed) and written to ``options.cert_dir``;
    * with ``options.manage_configuration`` the ValidatingWebhookConfiguration is created or
      patched after every bind and on every periodic check.

    ``api`` is set by the startup handler (and closed by ``close``).
    """

    def __init__(
        self,
        options: WebhookOptions,
        *,
        prepare_backoff: Backoff = PREPARE_BACKOFF,
        register_backoff: Backoff = REGISTER_BACKOFF,
    ) -> None:
        self.options = options
        self.prepare_backoff = prepare_backoff
        self.register_backoff = register_backoff
        self.api: ApiClient | None = None
        #: base64 PEM of the CAs the apiserver must trust (None until the first refresh).
        self.ca_bundle: str | None = None
        mounted = options.cert_files_dir
        self.files = CertFiles.under(mounted if mounted is not None else options.cert_dir)
        self.sans = serving_sans(options.webhook_settings(None), [options.host] if options.local else [])

    def _api(self) -> ApiClient:
        if self.api is None:
            raise WebhookCertError("the webhook has no API client yet")
        return self.api

    async def refresh_certificates(self) -> None:
        """Make the served files and ``ca_bundle`` current (renewing the Secret when due)."""
        options = self.options
        if options.cert_files_dir is not None:
            self.ca_bundle = base64.b64encode(self.files.cafile.read_bytes()).decode("ascii")
            return
        bundle, why = await ensure_certificates(
            self._api(),
            options.namespace,
            options.secret,
            self.sans,
            renew_before=options.renew_before,
            labels=LOCAL_LABELS if options.local else None,
        )
        if why:
            logger.info("Wrote webhook certificate Secret %s/%s: %s", options.namespace, options.secret, why)
        _, changed = write_files(bundle, options.cert_dir)
        if changed:
            logger.info("Wrote webhook certificate files to %s", options.cert_dir)
        self.ca_bundle = bundle.ca_bundle_b64

    async def refresh_configuration(self) -> None:
        """Create or patch the ValidatingWebhookConfiguration (when it is ours to manage)."""
        if not self.options.manage_configuration or self.api is None:
            return
        result = await ensure_configuration(self.api, self.options.webhook_settings(self.ca_bundle))
        if result != "unchanged":
            logger.info("ValidatingWebhookConfiguration %s %s", self.options.configuration, result)

    async def prepare(self) -> None:
        """Before the first bind: the server cannot start without its certificate files."""
        await persist(
            self.refresh_certificates,
            what="prepare the webhook certificate",
            retry_on=FAILURES,
            backoff=self.prepare_backoff,
            logger=logger,
        )

    async def on_listening(self, _: Any) -> None:
        """After every bind; not fatal: the server keeps answering and the periodic check tries again."""
        try:
            await persist(
                self.refresh_configuration,
                what="register the webhook configuration",
                retry_on=FAILURES,
                backoff=self.register_backoff,
                logger=logger,
            )
        except FAILURES as exc:
            logger.error(
                "Could not update ValidatingWebhookConfiguration %s: %s", self.options.configuration, exc
            )

    async def background(self) -> None:
        """Every ``renew_check_seconds``: renew the certificate when due, re-check the configuration."""
        while True:
            await asyncio.sleep(self.options.renew_check_seconds)
            try:
                await self.refresh_certificates()
                await self.refresh_configuration()
            except FAILURES as exc:
                logger.warning("Webhook certificate check failed (will retry): %s", exc)

    async def remove_local(self) -> list[str]:
        """Local mode only: delete the configuration and the Secret this run's local mode created
        (those labelled ``LOCAL_LABEL``); returns what was deleted. Failures are logged, not raised."""
        options = self.options
        if not options.local or self.api is None:
            return []
        removed = []
        try:
            if options.manage_configuration:
                current = await webhook_api.read_configuration(self.api, options.configuration)
                labels = ((current or {}).get("metadata") or {}).get("labels") or {}
                if current is not None and labels.get(LOCAL_LABEL) == "true":
                    await webhook_api.delete_configuration(self.api, options.configuration)
                    removed.append(f"ValidatingWebhookConfiguration {options.configuration}")
            if options.cert_files_dir is None:
                stored = await webhook_api.read_secret(self.api, options.namespace, options.secret)
                if stored is not None and stored.labels.get(LOCAL_LABEL) == "true":
                    await webhook_api.delete_secret(self.api, options.namespace, options.secret)
                    removed.append(f"Secret {options.namespace}/{options.secret}")
        except FAILURES as exc:
            logger.warning("Could not remove the local webhook's objects: %s", exc)
        if removed:
            logger.info("Local webhook stopped: deleted %s", " and ".join(removed))
        return removed

    async def close(self) -> None:
        if self.api is not None:
            await self.api.close()
            self.api = None
