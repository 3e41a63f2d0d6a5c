"""The ValidatingWebhookConfiguration gpushare ships (pure builder; no API calls).

One webhook entry per Kopf handler (the handler id is the URL path), so a denial names the
resource kind (``validate-pods.gpushare.io``). ``namespaceSelector`` excludes ``kube-system`` and
the operator's own namespace, ``objectSelector`` honours ``gpushare.io/webhook: ignore``,
``matchConditions`` (CEL from :mod:`gpushare.admission.cel`, laid out over lines by
:mod:`gpushare.admission.celfmt`) send only objects that ask for GPU
sharing (GPUSharePools always go; NVIDIA's ``nvidia.com/gpu`` only while the operator keeps the
NVIDIA gate open, :mod:`gpushare.admission.gate`),
``timeoutSeconds`` is at most 5, and ``failurePolicy`` is configurable (default ``Fail``) for the
workload kinds; the GPUSharePool entry is always ``Ignore`` (:data:`POOLS_FAILURE_POLICY`: while no
webhook answers, pools are guarded by the CRD's schema and CEL rules and by the operator's conflict
detection, and a fail-closed pools webhook would block the first pool of an install and the
operator's own finalizer removal; docs/concepts/admission.md, "Pools and the failure policy").

``python -m gpushare.admission.webhook_config`` prints the in-cluster manifest (a Service
reference, no caBundle: the operator keeps ``caBundle`` current). Local runs use a URL on
127.0.0.1 instead (``url_base``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from gpushare import constants as c
from gpushare.admission.cel import gpu_sharing_condition
from gpushare.admission.celfmt import readable, yaml_dump_all
from gpushare.rulekit.cel import KindPaths
from gpushare.rulekit.cel import kind_paths as cel_kind_paths
from gpushare.rulekit.kinds import DEFAULT_TABLE, KindTable, WorkloadKind

FailurePolicy = Literal["Fail", "Ignore"]

DEFAULT_CONFIGURATION_NAME = "gpushare-webhook"
DEFAULT_NAMESPACE = "gpushare-system"
DEFAULT_SERVICE = "gpushare-webhook"
DEFAULT_PORT = 9443
MAX_TIMEOUT_SECONDS = 5
#: The GPUSharePool webhook's failurePolicy, whatever the workloads' is (see the module docstring).
POOLS_FAILURE_POLICY: FailurePolicy = "Ignore"


@dataclass(frozen=True)
class WebhookTarget:
    """One admission handler: its id (= URL path segment), the resource it validates, the operations."""

    handler_id: str
    kind: str
    group: str
    version: str
    plural: str
    operations: tuple[str, ...]
    namespaced: bool = True
    #: Every served version the rule lists (``version`` first); empty means ``(version,)``.
    versions: tuple[str, ...] = ()
    #: The workload-kinds table entry (where the pod specs and containers are); None for pools.
    workload: WorkloadKind | None = None
    #: A failurePolicy of its own (pools: :data:`POOLS_FAILURE_POLICY`); None: the settings' policy.
    failure_policy: FailurePolicy | None = None


def targets_for(table: KindTable = DEFAULT_TABLE) -> tuple[WebhookTarget, ...]:
    """One target per kind of the workload-kinds table (:mod:`gpushare.rulekit.kinds`), then pools."""
    return (
        *(
            WebhookTarget(
                k.handler_id,
                k.kind,
                k.group,
                k.versions[0],
                k.plural,
                k.operations,
                k.namespaced,
                k.versions,
                workload=k,
            )
            for k in table.webhook_kinds()
        ),
        WebhookTarget(
            "validate-gpusharepools",
            c.KIND,
            c.GROUP,
            c.VERSION,
            c.PLURAL,
            ("CREATE", "UPDATE"),
            namespaced=False,
            failure_policy=POOLS_FAILURE_POLICY,
        ),
    )


TARGETS: tuple[WebhookTarget, ...] = targets_for()
TARGETS_BY_ID: dict[str, WebhookTarget] = {t.handler_id: t for t in TARGETS}

#: The matchCondition every workload webhook carries: only objects asking for GPU sharing are sent.
MATCH_CONDITION_NAME = "asks-for-gpu-sharing"


def kind_paths(target: WebhookTarget) -> KindPaths | None:
    """Where the target's kind keeps its containers and pod labels (from the workload-kinds table),
    for the generated CEL; None for pools and for kinds with a path CEL cannot select."""
    if target.workload is None:
        return None
    return cel_kind_paths(target.workload)


def match_conditions(target: WebhookTarget, *, nvidia_gate: bool = False) -> list[dict[str, str]]:
    """``[]`` for GPUSharePools (always sent) and kinds whose paths CEL cannot select (sent whole:
    the webhook decides); else the GPU-sharing condition of the kind. Shipped, the NVIDIA gate is
    closed: of NVIDIA's requests only ``nvidia.com/gpu.shared`` is sent; ``nvidia_gate`` (the
    operator's while an NVIDIA pool exists, :mod:`gpushare.admission.gate`) adds ``nvidia.com/gpu``
    in a pod spec with node constraints."""
    paths = kind_paths(target)
    if paths is None:
        return []
    expression = gpu_sharing_condition(paths, "all" if nvidia_gate else "shared")
    return [{"name": MATCH_CONDITION_NAME, "expression": readable(expression)}]


@dataclass(frozen=True)
class WebhookSettings:
    """How the apiserver reaches the webhook and how strict it is."""

    name: str = DEFAULT_CONFIGURATION_NAME
    #: The operator's namespace: excluded from the webhook, home of the Service and the cert Secret.
    namespace: str = DEFAULT_NAMESPACE
    service: str = DEFAULT_SERVICE
    service_port: int = 443
    #: Local/dev mode: ``https://127.0.0.1:<port>`` (handler ids are appended); None = Service mode.
    url_base: str | None = None
    #: base64 PEM of the CA that signed the serving certificate; None leaves it out.
    ca_bundle: str | None = None
    failure_policy: FailurePolicy = "Fail"
    timeout_seconds: int = MAX_TIMEOUT_SECONDS
    #: Namespaces never sent to the webhook, in addition to the operator's own.
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    #: The handlers to register; None = :data:`TARGETS` (configured workload kinds add more).
    targets: tuple[WebhookTarget, ...] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise ValueError(f"timeoutSeconds must be 1..{MAX_TIMEOUT_SECONDS}, got {self.timeout_seconds}")
        if self.failure_policy not in ("Fail", "Ignore"):
            raise ValueError(f"failurePolicy must be Fail or Ignore, got {self.failure_policy!r}")


def webhook_name(handler_id: str) -> str:
    return f"{handler_id}.{c.GROUP}"


def client_config(settings: WebhookSettings, handler_id: str) -> dict[str, Any]:
    cfg: dict[str, Any]
    if settings.url_base is not None:
        cfg = {"url": f"{settings.url_base.rstrip('/')}/{handler_id}"}
    else:
        cfg = {
            "service": {
                "name": settings.service,
                "namespace": settings.namespace,
                "port": settings.service_port,
                "path": f"/{handler_id}",
            }
        }
    if settings.ca_bundle:
        cfg["caBundle"] = settings.ca_bundle
    return cfg


def excluded_namespaces(settings: WebhookSettings) -> list[str]:
    return sorted({*settings.excluded_namespaces, settings.namespace})


def build_webhook(
    settings: WebhookSettings, target: WebhookTarget, *, nvidia_gate: bool = False
) -> dict[str, Any]:
    """One entry; ``nvidia_gate``: with the NVIDIA gate open (:func:`match_conditions`)."""
    hook: dict[str, Any] = {
        "name": webhook_name(target.handler_id),
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": target.failure_policy or settings.failure_policy,
        "matchPolicy": "Equivalent",
        "timeoutSeconds": settings.timeout_seconds,
        "clientConfig": client_config(settings, target.handler_id),
        "rules": [
            {
                "apiGroups": [target.group],
                "apiVersions": list(target.versions or (target.version,)),
                "resources": [target.plural],
                "operations": list(target.operations),
                "scope": "Namespaced" if target.namespaced else "Cluster",
            }
        ],
        "objectSelector": {
            "matchExpressions": [{"key": c.LABEL_WEBHOOK, "operator": "NotIn", "values": [c.WEBHOOK_IGNORE]}]
        },
    }
    conditions = match_conditions(target, nvidia_gate=nvidia_gate)
    if conditions:
        hook["matchConditions"] = conditions
    if target.namespaced:
        hook["namespaceSelector"] = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": excluded_namespaces(settings),
                }
            ]
        }
    return hook


def build_configuration(settings: WebhookSettings, *, nvidia_gate: bool = False) -> dict[str, Any]:
    """The whole ValidatingWebhookConfiguration (shipped with the NVIDIA gate closed)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {
            "name": settings.name,
            "labels": {
                "app.kubernetes.io/name": "gpushare-operator",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "webhooks": [
            build_webhook(settings, t, nvidia_gate=nvidia_gate) for t in settings.targets or TARGETS
        ],
    }


def build_service(settings: WebhookSettings, target_port: int = DEFAULT_PORT) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": settings.service, "namespace": settings.namespace},
        "spec": {
            "selector": {"app.kubernetes.io/name": "gpushare-operator"},
            "ports": [{"name": "webhook", "port": settings.service_port, "targetPort": target_port}],
        },
    }


def render_manifest(settings: WebhookSettings | None = None) -> str:
    settings = settings or WebhookSettings()
    header = (
        "# Generated by `python -m gpushare.admission.webhook_config`; do not edit by hand.\n"
        "# The operator fills in caBundle (from its CA Secret) and keeps it current.\n"
    )
    docs = [build_service(settings), build_configuration(settings)]
    return header + yaml_dump_all(docs, sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(render_manifest())
