"""How the webhook is served and registered (``gpushare run --webhook ...``; the flags are in
``gpushare.cli.run``)."""

from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gpushare.admission import DEFAULT_TABLE, KindTable
from gpushare.admission.webhook_config import (
    DEFAULT_CONFIGURATION_NAME,
    DEFAULT_NAMESPACE,
    DEFAULT_PORT,
    DEFAULT_SERVICE,
    MAX_TIMEOUT_SECONDS,
    FailurePolicy,
    WebhookSettings,
    WebhookTarget,
    targets_for,
)
from gpushare.webhook.server import ServerLimits
from gpushare.webhook.tls import RENEW_BEFORE

DEFAULT_SECRET = "gpushare-webhook-tls"


@dataclass(frozen=True)
class WebhookOptions:
    """How the webhook is served and registered."""

    #: Listen address; in a pod pass 0.0.0.0 (the apiserver connects through the Service).
    addr: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: Local/dev mode: the configuration uses ``https://<host>:<port>/<handler-id>``.
    local: bool = False
    host: str = "127.0.0.1"
    namespace: str = DEFAULT_NAMESPACE
    service: str = DEFAULT_SERVICE
    service_port: int = 443
    configuration: str = DEFAULT_CONFIGURATION_NAME
    #: Create/patch the ValidatingWebhookConfiguration (off: cert-manager's cainjector owns caBundle).
    manage_configuration: bool = True
    secret: str = DEFAULT_SECRET
    #: Where certificates from the Secret are written for the server.
    cert_dir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "gpushare-webhook")
    #: Mounted ``tls.crt``/``tls.key``/``ca.crt`` (cert-manager); no Secret is read or written.
    cert_files_dir: Path | None = None
    failure_policy: FailurePolicy = "Fail"
    timeout_seconds: int = MAX_TIMEOUT_SECONDS
    renew_before: dt.timedelta = RENEW_BEFORE
    renew_check_seconds: float = 3600.0
    file_check_interval: float = 60.0
    kubeconfig: str | None = None
    context: str | None = None
    #: Answer reviews without Kopf's per-request machinery (same rules, same indexes).
    direct: bool = True
    #: Workload kinds whose pod templates are checked (built-ins plus ``--workload-kinds FILE``).
    kinds: KindTable = DEFAULT_TABLE
    #: What one client may cost (body size and time, connections): docs/security.md.
    limits: ServerLimits = field(default_factory=ServerLimits)

    @property
    def targets(self) -> tuple[WebhookTarget, ...]:
        return targets_for(self.kinds)

    def webhook_settings(self, ca_bundle: str | None) -> WebhookSettings:
        return WebhookSettings(
            name=self.configuration,
            namespace=self.namespace,
            service=self.service,
            service_port=self.service_port,
            url_base=f"https://{self.host}:{self.port}" if self.local else None,
            ca_bundle=ca_bundle,
            failure_policy=self.failure_policy,
            timeout_seconds=self.timeout_seconds,
            targets=None if self.kinds is DEFAULT_TABLE else self.targets,
        )
