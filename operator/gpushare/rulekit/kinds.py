"""Where pod templates live, per workload kind: ONE table used by the rules, ``check`` and the webhook.

Each :class:`WorkloadKind` names a resource (group, versions, plural, kind, scope) and its
:class:`PodSource` entries. A pod source is a *path* from the object root to something pod-like
(a PodSpec, or an Argo template, or a KServe predictor) that carries the node constraints
(``nodeSelector``, ``affinity``, ``nodeName``), plus the container locations relative to it and where
the pod's labels are (a backend may read a pod label, as ACK's multi-GPU sharing does).

Path syntax: dot-separated keys; ``*`` is every value of a map (or every item of a list) and
``[*]`` every item of a list, e.g. ``spec.pytorchReplicaSpecs.*.template.spec`` or
``spec.workerGroupSpecs[*].template.spec``. ``inherit`` is a path, from the object root, to a
spec whose ``nodeSelector`` / ``affinity`` / ``tolerations`` apply when the pod-like lacks its own
(Argo's workflow-level scheduling fields).

Administrators add kinds without code: a YAML file (``gpushare check --kinds FILE``, ``gpushare run
--workload-kinds FILE``, mountable from a ConfigMap) with the same fields, see :func:`load_kinds`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpushare import constants as c

#: Containers of a PodSpec, relative to the spec (ephemeral containers are counted too).
POD_CONTAINERS: tuple[str, ...] = ("containers[*]", "initContainers[*]", "ephemeralContainers[*]")
#: Labels of a pod template: ``metadata.labels`` beside the spec (``spec.template.metadata``).
SIBLING_LABELS = "../metadata.labels"


@dataclass(frozen=True)
class PodSource:
    """One place in an object that becomes pods."""

    path: str
    containers: tuple[str, ...] = POD_CONTAINERS
    labels: str = SIBLING_LABELS
    inherit: str | None = None


@dataclass(frozen=True)
class WorkloadKind:
    kind: str
    group: str
    versions: tuple[str, ...]
    plural: str
    sources: tuple[PodSource, ...]
    namespaced: bool = True
    #: Operations the webhook checks (container resources of a Pod are immutable: CREATE only).
    operations: tuple[str, ...] = ("CREATE", "UPDATE")
    #: "builtin" or the file the kind was configured in.
    origin: str = "builtin"

    @property
    def version(self) -> str:
        """The preferred version (the first listed)."""
        return self.versions[0]

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    @property
    def handler_id(self) -> str:
        """The webhook handler id (= URL path): ``validate-<plural>``, group-qualified unless built in."""
        if self.group in _BUILTIN_GROUPS:
            return f"validate-{self.plural}"
        return f"validate-{self.plural}-{self.group.replace('.', '-')}"

    @property
    def pod_spec_paths(self) -> tuple[str, ...]:
        return tuple(s.path for s in self.sources)

    @property
    def container_paths(self) -> tuple[str, ...]:
        """Every container location from the object root (``spec.template.spec.containers[*]``)."""
        return tuple(f"{s.path}.{rel}" for s in self.sources for rel in s.containers)


_BUILTIN_GROUPS = frozenset({"", "apps", "batch"})


def _pod_template(path: str) -> PodSource:
    return PodSource(path)


def _kubeflow(kind: str, plural: str, replicas: str, versions: tuple[str, ...] = ("v1",)) -> WorkloadKind:
    return WorkloadKind(
        kind, "kubeflow.org", versions, plural, (_pod_template(f"spec.{replicas}.*.template.spec"),)
    )


def _ray(prefix: str) -> tuple[PodSource, ...]:
    return (
        _pod_template(f"{prefix}.headGroupSpec.template.spec"),
        _pod_template(f"{prefix}.workerGroupSpecs[*].template.spec"),
    )


#: Argo template containers: ``container``, ``script``, ``containerSet.containers``, sidecars, inits.
ARGO_CONTAINERS: tuple[str, ...] = (
    "container",
    "script",
    "containerSet.containers[*]",
    "sidecars[*]",
    "initContainers[*]",
)


def _argo(kind: str, plural: str, workflow_spec: str, namespaced: bool = True) -> WorkloadKind:
    return WorkloadKind(
        kind,
        "argoproj.io",
        ("v1alpha1",),
        plural,
        (
            PodSource(
                f"{workflow_spec}.templates[*]",
                containers=ARGO_CONTAINERS,
                labels="metadata.labels",
                inherit=workflow_spec,
            ),
        ),
        namespaced=namespaced,
    )


#: KServe predictor: a PodSpec inline plus one container per model format.
KSERVE_PREDICTOR_CONTAINERS: tuple[str, ...] = (
    *POD_CONTAINERS,
    "model",
    "pytorch",
    "tensorflow",
    "sklearn",
    "xgboost",
    "onnx",
    "triton",
    "huggingface",
    "lightgbm",
    "paddle",
    "pmml",
)

BUILTIN_KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("Pod", "", ("v1",), "pods", (_pod_template("spec"),), operations=("CREATE",)),
    WorkloadKind("Deployment", "apps", ("v1",), "deployments", (_pod_template("spec.template.spec"),)),
    WorkloadKind("StatefulSet", "apps", ("v1",), "statefulsets", (_pod_template("spec.template.spec"),)),
    WorkloadKind("DaemonSet", "apps", ("v1",), "daemonsets", (_pod_template("spec.template.spec"),)),
    WorkloadKind("ReplicaSet", "apps", ("v1",), "replicasets", (_pod_template("spec.template.spec"),)),
    WorkloadKind("Job", "batch", ("v1",), "jobs", (_pod_template("spec.template.spec"),)),
    WorkloadKind(
        "CronJob", "batch", ("v1",), "cronjobs", (_pod_template("spec.jobTemplate.spec.template.spec"),)
    ),
    # Kubeflow training operator (Arena submits these); MPIJob also as the MPI operator's v2beta1.
    _kubeflow("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
    _kubeflow("TFJob", "tfjobs", "tfReplicaSpecs"),
    _kubeflow("MPIJob", "mpijobs", "mpiReplicaSpecs", ("v1", "v2beta1")),
    _kubeflow("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
    _kubeflow("PaddleJob", "paddlejobs", "paddleReplicaSpecs"),
    # KubeRay.
    WorkloadKind("RayCluster", "ray.io", ("v1",), "rayclusters", _ray("spec")),
    WorkloadKind(
        "RayJob",
        "ray.io",
        ("v1",),
        "rayjobs",
        (*_ray("spec.rayClusterSpec"), _pod_template("spec.submitterPodTemplate.spec")),
    ),
    WorkloadKind("RayService", "ray.io", ("v1",), "rayservices", _ray("spec.rayClusterConfig")),
    # Argo Workflows.
    _argo("Workflow", "workflows", "spec"),
    _argo("WorkflowTemplate", "workflowtemplates", "spec"),
    _argo("ClusterWorkflowTemplate", "clusterworkflowtemplates", "spec", namespaced=False),
    _argo("CronWorkflow", "cronworkflows", "spec.workflowSpec"),
    # Volcano, JobSet, LeaderWorkerSet, KServe.
    WorkloadKind(
        "Job", "batch.volcano.sh", ("v1alpha1",), "jobs", (_pod_template("spec.tasks[*].template.spec"),)
    ),
    WorkloadKind(
        "JobSet",
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "jobsets",
        (_pod_template("spec.replicatedJobs[*].template.spec.template.spec"),),
    ),
    WorkloadKind(
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        ("v1",),
        "leaderworkersets",
        (
            _pod_template("spec.leaderWorkerTemplate.leaderTemplate.spec"),
            _pod_template("spec.leaderWorkerTemplate.workerTemplate.spec"),
        ),
    ),
    WorkloadKind(
        "InferenceService",
        "serving.kserve.io",
        ("v1beta1",),
        "inferenceservices",
        (PodSource("spec.predictor", containers=KSERVE_PREDICTOR_CONTAINERS, labels="labels"),),
    ),
)

#: Kinds the rules know but the webhook does not register (their pods are checked as Pods anyway).
EXTRA_KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("PodTemplate", "", ("v1",), "podtemplates", (PodSource("template.spec"),)),
    WorkloadKind(
        "ReplicationController", "", ("v1",), "replicationcontrollers", (_pod_template("spec.template.spec"),)
    ),
)

#: Built-in cluster-scoped kinds that may show up in manifests (for object names).
CLUSTER_SCOPED: frozenset[str] = frozenset(
    {
        "Node",
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PriorityClass",
        "RuntimeClass",
        "IngressClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "APIService",
        c.KIND,
    }
)


# --- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KindTable:
    """Workload kinds by (group, kind); built-ins plus configured ones (configured entries win)."""

    kinds: tuple[WorkloadKind, ...]
    extra: tuple[WorkloadKind, ...] = EXTRA_KINDS
    _index: dict[tuple[str, str], WorkloadKind] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for k in (*self.extra, *self.kinds):
            self._index[(k.group, k.kind)] = k

    def lookup(self, obj: Mapping[str, Any]) -> WorkloadKind | None:
        kind = obj.get("kind")
        if not isinstance(kind, str):
            return None
        api = obj.get("apiVersion")
        if isinstance(api, str):
            group = api.rpartition("/")[0] if "/" in api else ""
            return self._index.get((group, kind))
        # No apiVersion: the kind alone, a built-in group first (``Job`` is batch/v1's).
        found = [k for (_, name), k in self._index.items() if name == kind]
        core = [k for k in found if k.group in _BUILTIN_GROUPS]
        if core:
            return core[0]
        return found[0] if len(found) == 1 else None

    def webhook_kinds(self) -> tuple[WorkloadKind, ...]:
        return self.kinds

    def is_cluster_scoped(self, obj: Mapping[str, Any]) -> bool:
        known = self.lookup(obj)
        if known is not None:
            return not known.namespaced
        return obj.get("kind") in CLUSTER_SCOPED


DEFAULT_TABLE = KindTable(BUILTIN_KINDS)


def kind_targets(table: KindTable = DEFAULT_TABLE) -> tuple[WorkloadKind, ...]:
    """The kinds a webhook registration or a ValidatingAdmissionPolicy covers: each WorkloadKind
    gives group, version(s), plural, kind, scope, operations and the pod-spec and container paths."""
    return table.webhook_kinds()


# --- paths ----------------------------------------------------------------------------------------

_SEGMENT_RE = re.compile(r"^([A-Za-z0-9_-]+|\*)(\[\*\])?$")


class KindsError(ValueError):
    """A workload-kinds file or entry that cannot be used; the message names file, entry and field."""


def parse_path(path: str) -> tuple[str, ...]:
    """``spec.a[*].b`` -> ``("spec", "a", "[*]", "b")``; raises KindsError when malformed."""
    if not isinstance(path, str) or not path:
        raise KindsError(f"path {path!r} is empty")
    return _parse_path(path)


@functools.lru_cache(maxsize=1024)
def _parse_path(path: str) -> tuple[str, ...]:
    """Cached: the rules parse the same few paths of the kinds table on every review (a path that
    raises is not cached)."""
    out: list[str] = []
    for part in path.split("."):
        m = _SEGMENT_RE.match(part)
        if not m:
            raise KindsError(f"path {path!r}: segment {part!r} is not a key, '*' or 'key[*]'")
        out.append(m.group(1))
        if m.group(2):
            out.append("[*]")
    return tuple(out)


def walk(node: Any, segments: Sequence[str], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``(dotted path, value)`` that ``segments`` reaches from ``node`` (missing parts: none)."""
    if not segments:
        yield prefix, node
        return
    head, rest = segments[0], segments[1:]
    if head == "[*]" or (head == "*" and isinstance(node, list)):
        if isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, rest, f"{prefix}[{i}]")
        return
    if head == "*":
        if isinstance(node, Mapping):
            for key, value in node.items():
                yield from walk(value, rest, f"{prefix}.{key}" if prefix else str(key))
        return
    if isinstance(node, Mapping) and head in node:
        yield from walk(node[head], rest, f"{prefix}.{head}" if prefix else head)


def resolve_relative(root: Any, path: str, rel: str) -> Any:
    """The value at ``rel`` relative to the object at dotted ``path`` (each ``../`` goes up one key)."""
    parts = _split_concrete(path)
    up, rest = split_up(rel)
    for _ in range(up):
        if parts:
            parts.pop()
    parts.extend(rest.split(".") if rest else [])
    node: Any = root
    for part in parts:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        elif isinstance(node, Mapping):
            node = node.get(part)
        else:
            node = None
        if node is None:
            return None
    return node


#: The word used in messages for the containers at a relative path, by its last key.
CONTAINER_LABELS: dict[str, str] = {
    "containers": "container",
    "initContainers": "init container",
    "ephemeralContainers": "ephemeral container",
    "container": "container",
    "script": "script",
    "sidecars": "sidecar",
}


def container_key(rel: str) -> str:
    """The last key of a container path (``containerSet.containers[*]`` -> ``containers``)."""
    return next((s for s in reversed(parse_path(rel)) if s not in ("[*]", "*")), rel)


def container_label(rel: str) -> str:
    """``initContainers[*]`` -> ``init container``; unknown keys -> ``<key> container``."""
    key = container_key(rel)
    return CONTAINER_LABELS.get(key, f"{key} container")


def pod_labels_path(path: str, rel: str) -> str:
    """Where a pod-like's labels are: ``rel`` resolved against ``path`` (concrete or wildcard;
    each ``../`` drops one dotted part): ``spec.template.spec`` + ``../metadata.labels`` ->
    ``spec.template.metadata.labels``."""
    up, rest = split_up(rel)
    parts = path.split(".")
    del parts[len(parts) - up :]
    return ".".join([*parts, *([rest] if rest else [])])


def split_up(rel: str) -> tuple[int, str]:
    """``../../a.b`` -> ``(2, "a.b")``."""
    up = 0
    while rel.startswith("../"):
        up += 1
        rel = rel[3:]
    return up, rel


def _split_concrete(path: str) -> list[str | int]:
    """``a.b[0][1]`` -> ``["a", "b", 0, 1]``. An index has at most 9 digits (no list is longer):
    a map key that only looks like a long index, such as ``"[" + "9" * 4301 + "]"`` in a hostile
    object, stays a key instead of reaching ``int()`` (which refuses more than 4300 digits)."""
    out: list[str | int] = []
    for part in path.split(".") if path else []:
        m = re.match(r"^([^\[]*)((?:\[\d{1,9}\])*)$", part)
        if m is None:
            out.append(part)
            continue
        if m.group(1):
            out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return out


# --- configuration --------------------------------------------------------------------------------

_ENTRY_KEYS = {"kind", "group", "version", "versions", "plural", "namespaced", "podSpecs", "operations"}
_SOURCE_KEYS = {"path", "containers", "labels", "inherit"}


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise KindsError(f"{where}: must be a non-empty list of strings")
    return tuple(value)


def _known_fields(raw: Mapping[str, Any], known: Set[str], where: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise KindsError(
            f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )


def _source(raw: Any, where: str) -> PodSource:
    if isinstance(raw, str):
        try:
            parse_path(raw)
        except KindsError as exc:
            raise KindsError(f"{where}: {exc}") from None
        return PodSource(raw)
    if not isinstance(raw, Mapping):
        raise KindsError(f"{where}: must be a path string or an object with 'path'")
    _known_fields(raw, _SOURCE_KEYS, where)
    path = raw.get("path")
    if not isinstance(path, str):
        raise KindsError(f"{where}.path: is required (a string)")
    try:
        parse_path(path)
        containers = (
            _str_list(raw["containers"], f"{where}.containers") if "containers" in raw else POD_CONTAINERS
        )
        for rel in containers:
            parse_path(rel)
        labels = raw.get("labels", SIBLING_LABELS)
        inherit = raw.get("inherit")
        if not isinstance(labels, str) or (inherit is not None and not isinstance(inherit, str)):
            raise KindsError("labels and inherit are path strings")
        if inherit is not None:
            parse_path(inherit)
    except KindsError as exc:
        raise KindsError(f"{where}: {exc}") from None
    return PodSource(path, containers, labels, inherit)


def parse_kind(raw: Any, where: str, origin: str = "config") -> WorkloadKind:
    """One configured kind (the YAML entry format documented in docs/reference/workload-kinds.md)."""
    if not isinstance(raw, Mapping):
        raise KindsError(f"{where}: must be an object")
    _known_fields(raw, _ENTRY_KEYS, where)
    kind, group, plural = raw.get("kind"), raw.get("group"), raw.get("plural")
    for name, value in (("kind", kind), ("plural", plural)):
        if not isinstance(value, str) or not value:
            raise KindsError(f"{where}.{name}: is required (a non-empty string)")
    if not isinstance(group, str):
        raise KindsError(f'{where}.group: is required (a string; "" for the core group)')
    if "versions" in raw:
        versions = _str_list(raw["versions"], f"{where}.versions")
    elif isinstance(raw.get("version"), str) and raw["version"]:
        versions = (raw["version"],)
    else:
        raise KindsError(f"{where}.version: is required (e.g. v1)")
    namespaced = raw.get("namespaced", True)
    if not isinstance(namespaced, bool):
        raise KindsError(f"{where}.namespaced: must be true or false")
    specs = raw.get("podSpecs")
    if not isinstance(specs, list) or not specs:
        raise KindsError(f"{where}.podSpecs: must be a non-empty list of paths or {{path, containers, ...}}")
    operations = _str_list(raw.get("operations", ["CREATE", "UPDATE"]), f"{where}.operations")
    bad_ops = sorted(set(operations) - {"CREATE", "UPDATE"})
    if bad_ops:
        raise KindsError(f"{where}.operations: {', '.join(bad_ops)} is not CREATE or UPDATE")
    sources = tuple(_source(s, f"{where}.podSpecs[{i}]") for i, s in enumerate(specs))
    assert isinstance(kind, str) and isinstance(plural, str)
    return WorkloadKind(kind, group, versions, plural, sources, namespaced, operations, origin)


#: Bounds on a kinds file (it is configuration, but may come from a shared ConfigMap).
MAX_KINDS_FILE_BYTES = 256 * 1024


def load_kinds(text: str, source: str) -> tuple[WorkloadKind, ...]:
    """Kinds from a YAML file: a list of entries, or ``{kinds: [...]}`` (ConfigMap-friendly)."""
    if len(text.encode()) > MAX_KINDS_FILE_BYTES:
        raise KindsError(f"{source}: larger than {MAX_KINDS_FILE_BYTES // 1024} KiB")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KindsError(f"{source}: is not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if isinstance(data, Mapping) and "kinds" in data:
        data = data["kinds"]
    if not isinstance(data, list):
        raise KindsError(f"{source}: must be a list of kinds (or an object with a 'kinds' list)")
    return tuple(parse_kind(e, f"{source}: kinds[{i}]", origin=source) for i, e in enumerate(data))


def table_with(configured: Sequence[WorkloadKind]) -> KindTable:
    """The built-in table plus ``configured`` kinds (a configured (group, kind) replaces a built-in)."""
    keys = {(k.group, k.kind) for k in configured}
    return KindTable((*(k for k in BUILTIN_KINDS if (k.group, k.kind) not in keys), *configured))


def object_name(obj: Mapping[str, Any], table: KindTable = DEFAULT_TABLE) -> str:
    """``Kind/namespace/name`` (``default`` when unset), or ``Kind/name`` for cluster-scoped kinds."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "?"
    if table.is_cluster_scoped(obj):
        return f"{kind}/{name}"
    ns = meta.get("namespace")
    return f"{kind}/{ns if isinstance(ns, str) and ns else 'default'}/{name}"
