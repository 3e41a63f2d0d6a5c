"""Small frozen views of the Kubernetes objects the planner reads, built from raw dicts."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from gpushare import constants as c
from gpushare.api.quantity import quantity_int as quantity_int  # re-exported: the planner's lenient reading
from gpushare.backends import BACKENDS
from gpushare.rulekit.requests import effective_requests

#: The GPU resources every backend's pods may request (prefixes: ``SharingBackend.pod_resources``).
_GPU_PREFIXES: tuple[str, ...] = tuple(dict.fromkeys(r for b in BACKENDS.values() for r in b.pod_resources))


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """Requests of one container; for extended resources a limit alone implies the request."""
    resources = container.get("resources") or {}
    out: dict[str, int] = {}
    for source in ("limits", "requests"):  # requests win when both are given
        for name, value in (resources.get(source) or {}).items():
            if str(name).startswith(_GPU_PREFIXES):
                out[str(name)] = quantity_int(value)
    return out


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective GPU requests of a pod spec (every backend's resources), as the scheduler reserves
    them: :func:`gpushare.rulekit.requests.effective_requests` (containers and sidecar init
    containers add up; a regular init container runs with the sidecars declared before it)."""
    return effective_requests(spec, _container_requests)


def _interned(items: Mapping[str, Any] | None, keep: str | tuple[str, ...] = "") -> dict[str, str]:
    """A str→str copy with shared (interned) keys and values, only the keys starting with ``keep``."""
    if not items:
        return {}
    intern = sys.intern
    out: dict[str, str] = {}
    for k, v in items.items():
        key = k if type(k) is str else str(k)  # JSON gives str; a node written by hand may not
        if not keep or key.startswith(keep):
            out[intern(key)] = intern(v if type(v) is str else str(v))
    return out


#: The allocatable the operator keeps: what the backends' evidence reads (``SharingBackend.advertises``).
_KEPT_ALLOCATABLE: tuple[str, ...] = tuple(
    dict.fromkeys(r for b in BACKENDS.values() for r in b.node_resources)
)


#: The labels whose latest write by another field manager than gpushare's the node views keep
#: (``SharingBackend.timed_labels``).
_TIMED_LABELS: tuple[str, ...] = tuple(dict.fromkeys(k for b in BACKENDS.values() for k in b.timed_labels))
#: gpushare's own field managers: their writes are never another's.
_OURS: frozenset[str] = frozenset((c.OPERATOR_FIELD_MANAGER, c.AGENT_FIELD_MANAGER))
#: The times of a node with none (most nodes): one shared empty mapping.
_NO_TIMES: Mapping[str, datetime] = MappingProxyType({})


def label_times(managed: Any, keys: tuple[str, ...] = _TIMED_LABELS) -> Mapping[str, datetime]:
    """For each of ``keys`` that a field manager other than gpushare's owns on a node (its
    ``metadata.managedFields``), the latest ``time`` of such an entry: the apiserver's record of
    when that manager last changed a field it owns (to the second), the label or another."""
    out: dict[str, datetime] = {}
    if not keys or not isinstance(managed, list):
        return _NO_TIMES
    for entry in managed:
        if not isinstance(entry, Mapping) or entry.get("manager") in _OURS:
            continue
        fields = entry.get("fieldsV1")
        meta = fields.get("f:metadata") if isinstance(fields, Mapping) else None
        labels = meta.get("f:labels") if isinstance(meta, Mapping) else None
        owned = [k for k in keys if isinstance(labels, Mapping) and f"f:{k}" in labels]
        # Only an entry that owns a timed label has its time parsed (most entries, on every node
        # event the watch delivers, own none).
        when = parse_time(str(entry.get("time") or "")) if owned else None
        for key in owned:
            if when is not None and (key not in out or when > out[key]):
                out[sys.intern(key)] = when
    return out or _NO_TIMES


def _node_ready(status: Mapping[str, Any]) -> bool:
    """False only for a Ready condition that is not True; unknown (no Ready condition, e.g. a node
    written by hand for `gpushare plan`) counts as ready."""
    return not any(
        cond.get("type") == "Ready" and cond.get("status") != "True"
        for cond in status.get("conditions") or []
    )


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    allocatable: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    #: GPU capacity (kept like ``allocatable``): a real kubelet keeps a plugin's resources in capacity
    #: while their devices are unhealthy (plugin gone) and shows 0 in allocatable
    #: (``SharingBackend.plugin_unregistered``).
    capacity: Mapping[str, str] = field(default_factory=dict)
    #: ``metadata.resourceVersion`` (opaque; the operator uses it to tell fresher copies apart).
    resource_version: str = field(default="", compare=False)
    #: When another field manager than gpushare's last wrote each label a backend asks to be
    #: timed (:func:`label_times`; ``SharingBackend.timed_labels``): only those it owns.
    label_times: Mapping[str, datetime] = field(default_factory=dict)

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> NodeView:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
            allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
            ready=_node_ready(status),
            capacity=_interned(status.get("capacity"), _KEPT_ALLOCATABLE),
            resource_version=str(meta.get("resourceVersion") or ""),
            label_times=label_times(meta.get("managedFields")),
        )

    @classmethod
    def project(cls, obj: Mapping[str, Any]) -> NodeView:
        """The slim copy the operator's index keeps: every label (pool selectors may use any),
        gpushare's own annotations only, GPU allocatable only, the times of the timed labels only;
        strings interned."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return cls(
            name=sys.intern(str(meta.get("name", ""))),
            labels=_interned(meta.get("labels")),
            annotations=_interned(meta.get("annotations"), c.GROUP + "/"),
            unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
            allocatable=_interned(status.get("allocatable"), _KEPT_ALLOCATABLE),
            ready=_node_ready(status),
            capacity=_interned(status.get("capacity"), _KEPT_ALLOCATABLE),
            resource_version=str(meta.get("resourceVersion") or ""),
            label_times=label_times(meta.get("managedFields")),
        )

    def allocatable_int(self, resource: str) -> int:
        return quantity_int(self.allocatable.get(resource, 0))


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    uid: str = ""
    node_name: str = ""
    phase: str = "Pending"
    deletion: bool = False
    #: Its effective GPU requests (:func:`pod_requests`, every backend's resources), the non-zero ones.
    requests: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    created: str = ""
    ready: bool = False
    #: ``status.reason`` of a Failed pod (e.g. ``UnexpectedAdmissionError``: the kubelet refused it)
    reason: str = ""
    #: Which of its containers is down or has restarted, and why (:func:`container_problem`); ""
    #: for a pod whose containers never restarted and all run, and for a Ready GPU pod.
    problem: str = ""

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        requests = pod_requests(spec)
        ready = any(
            cond.get("type") == "Ready" and cond.get("status") == "True"
            for cond in status.get("conditions") or []
        )
        # Namespaces, node names, phases and label keys and values repeat across pods: interned,
        # the model holds one copy of each (820 -> 583 bytes per kept GPU pod, bench_model.py).
        return cls(
            namespace=sys.intern(str(meta.get("namespace", ""))),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_name=sys.intern(str(spec.get("nodeName") or "")),
            phase=sys.intern(str(status.get("phase") or "Pending")),
            deletion=meta.get("deletionTimestamp") is not None,
            requests={sys.intern(k): v for k, v in requests.items() if v},
            labels=_interned(meta.get("labels")),
            created=str(meta.get("creationTimestamp") or ""),
            ready=ready,
            reason=sys.intern(str(status.get("reason") or "")) if status.get("phase") == "Failed" else "",
            # Only device plugin pods (no GPU requests) are asked why a Ready pod restarted: a
            # GPU pod's containers are read only while it is not Ready (the pod watch's hot path).
            problem=container_problem(status) if not ready or not requests else "",
        )

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def container_problem(status: Mapping[str, Any]) -> str:
    """The first container (init containers first) that is waiting or has restarted, as
    ``container C: CrashLoopBackOff, 4 restarts, last exit 1: <message>``; "" when none."""
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        restarts = int(cs.get("restartCount") or 0)
        if not waiting and not restarts:
            continue
        parts = [f"container {cs.get('name')}: {waiting or 'restarted'}"]
        if restarts:
            parts.append(f"{restarts} restarts")
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last:
            text = str(last.get("message") or "").strip().splitlines()
            exit_info = f"last exit {last.get('exitCode')}"
            parts.append(f"{exit_info}: {text[-1][:200]}" if text else exit_info)
        return ", ".join(parts)
    return ""


def pods_by_node(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.node_name:
            out.setdefault(pod.node_name, []).append(pod)
    return out


@dataclass(frozen=True)
class PluginPod:
    """A device plugin pod as the restart step reads it (from the pod watch or a pod list)."""

    node: str
    namespace: str
    name: str
    uid: str
    created: datetime | None
    ready: bool
    deleting: bool
    #: Why a container is not running or restarted, from its status: "container C:
    #: CrashLoopBackOff, 3 restarts, last exit 1: <last termination message>"; "" when none did.
    problem: str = ""


def parse_time(value: str) -> datetime | None:
    """An RFC 3339 timestamp (``...Z``) as a datetime; None if it is not one."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def plugin_pod(pod: PodView) -> PluginPod:
    """The restart step's view of a watched pod (Ready only while Running)."""
    return PluginPod(
        node=pod.node_name,
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        created=parse_time(pod.created) if pod.created else None,
        ready=pod.ready and pod.phase == "Running",
        deleting=pod.deletion,
        problem=pod.problem,
    )
