"""Options of ``gpushare run`` that the handlers read from the operator memo."""

from __future__ import annotations

from dataclasses import dataclass

from gpushare.admission.webhook_config import DEFAULT_CONFIGURATION_NAME, TARGETS, WebhookTarget
from gpushare.backends.nvidia.configmap import KEEP_UNUSED


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None = None
    context: str | None = None
    events_namespace: str = "default"
    metrics_port: int = 8080
    metrics_addr: str = "127.0.0.1"
    peering: str | None = None
    #: Namespaces where device-plugin pods may be restarted (``--plugin-namespaces``); None = any.
    plugin_namespaces: frozenset[str] | None = None
    #: Seconds a config gpushare wrote into NVIDIA's plugin ConfigMap stays once unused, from when
    #: it was written (``--nvidia-config-retention``).
    nvidia_config_retention: int = int(KEEP_UNUSED.total_seconds())
    #: The ValidatingWebhookConfiguration whose NVIDIA gate the operator keeps
    #: (``--webhook-configuration``) and its gpushare entries (with ``--workload-kinds``' kinds).
    webhook_configuration: str = DEFAULT_CONFIGURATION_NAME
    webhook_targets: tuple[WebhookTarget, ...] = TARGETS
