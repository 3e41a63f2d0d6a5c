"""A tiny synchronous Kubernetes client (urllib) for tests that run beside an async operator.

Used by tests/integration/test_webhook.py and test_admission_policy.py: requests go through the
real kube-apiserver (mostly server-side dry runs, which also call validating webhooks and
ValidatingAdmissionPolicies) while the webhook under test runs on an event loop in the same process.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from gpushare.devcluster import ClusterInfo

ADM = "/apis/admissionregistration.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1"

#: kind -> (API prefix, plural) for every kind the tests create.
PLURALS: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "Node": ("/api/v1", "nodes"),
    "Namespace": ("/api/v1", "namespaces"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "GPUSharePool": ("/apis/gpushare.io/v1alpha1", "gpusharepools"),
    "ValidatingAdmissionPolicy": (ADM, "validatingadmissionpolicies"),
    "ValidatingAdmissionPolicyBinding": (ADM, "validatingadmissionpolicybindings"),
    "ValidatingWebhookConfiguration": (ADM, "validatingwebhookconfigurations"),
    "CustomResourceDefinition": (CRDS, "customresourcedefinitions"),
    # Minimal schema-less CRDs the tests install (tests/integration/crds/, test_admission_policy.py).
    "GPUTrainJob": ("/apis/test.gpushare.io/v1", "gputrainjobs"),
    "PyTorchJob": ("/apis/kubeflow.org/v1", "pytorchjobs"),
    "TFJob": ("/apis/kubeflow.org/v1", "tfjobs"),
    "RayCluster": ("/apis/ray.io/v1", "rayclusters"),
    "Workflow": ("/apis/argoproj.io/v1alpha1", "workflows"),
}
CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "GPUSharePool",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "CustomResourceDefinition",
    }
)


@dataclass
class Response:
    status: int
    body: dict[str, Any]
    #: the texts of the response's ``Warning`` headers (admission warnings).
    warnings: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


def warning_text(header: str) -> str:
    """``299 - "text"`` (RFC 7234, as the apiserver writes it) -> ``text``."""
    code, _, rest = header.partition(" - ")
    assert code == "299", header
    assert rest.startswith('"') and rest.endswith('"'), header
    return rest[1:-1].replace('\\"', '"').replace("\\\\", "\\")


def collection_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    """Where ``obj`` is created: its kind's collection, in ``namespace``, else the object's
    namespace, else ``default`` (cluster-scoped kinds: no namespace)."""
    prefix, plural = PLURALS[obj["kind"]]
    if obj["kind"] in CLUSTER_SCOPED:
        return f"{prefix}/{plural}"
    ns = namespace or obj["metadata"].get("namespace") or "default"
    return f"{prefix}/namespaces/{ns}/{plural}"


class Kube:
    """A tiny synchronous Kubernetes client (urllib), authenticated with the cluster's token."""

    def __init__(self, info: ClusterInfo) -> None:
        self.server = info.server.rstrip("/")
        self.token = info.token
        self.ctx = ssl.create_default_context(cafile=str(info.ca_path))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", **params: str
    ) -> Response:
        url = self.server + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                status, raw, headers = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as exc:
            with exc:  # close its socket now, not at some later garbage collection
                status, raw, headers = exc.code, exc.read(), exc.headers
        warnings = [warning_text(w) for w in headers.get_all("Warning") or []]
        try:
            return Response(status, json.loads(raw) if raw else {}, warnings)
        except ValueError:  # e.g. "404 page not found" before a CRD is served
            return Response(status, {"message": raw.decode(errors="replace")}, warnings)

    def create(self, obj: dict[str, Any], namespace: str | None = None, dry_run: bool = True) -> Response:
        """POST ``obj`` (a server-side dry run unless ``dry_run=False``), in ``namespace`` if given."""
        if namespace is not None:
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        return self.request(
            "POST", collection_path(obj, namespace), obj, **({"dryRun": "All"} if dry_run else {})
        )

    def delete(self, obj: dict[str, Any], namespace: str | None = None) -> None:
        name = obj["metadata"]["name"]
        self.request("DELETE", f"{collection_path(obj, namespace)}/{name}", propagationPolicy="Background")
