"""Find the pod specs inside Kubernetes objects (Pods and the templates of workload controllers)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpushare import constants as c

#: Where each kind keeps its pod spec, as a path of keys from the object root.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}

#: Container lists that can request resources, with the word used in messages.
CONTAINER_LISTS: tuple[tuple[str, str], ...] = (
    ("containers", "container"),
    ("initContainers", "init container"),
)


def pod_specs(obj: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``[(path, podspec)]`` for a Pod or a workload's pod template; ``[]`` for other kinds.

    ``path`` is the dotted location of the spec (``spec.template.spec``). Malformed objects (a
    missing or non-object spec) give ``[]`` rather than an exception.
    """
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return []
    keys = POD_SPEC_PATHS.get(kind)
    if keys is None:
        return []
    node: Any = obj
    for key in keys:
        if not isinstance(node, Mapping):
            return []
        node = node.get(key)
    if not isinstance(node, dict):
        return []
    return [(".".join(keys), node)]


@dataclass(frozen=True)
class ContainerRef:
    """One container of a pod spec: where it is, what it is called, and its resources maps."""

    path: str  # e.g. spec.template.spec.containers[0]
    label: str  # "container" or "init container"
    name: str
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]

    @property
    def display(self) -> str:
        return f'{self.label} "{self.name}"'


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def iter_containers(spec_path: str, spec: Mapping[str, Any]) -> Iterator[ContainerRef]:
    """Containers and init containers of a pod spec; entries that are not objects are skipped."""
    for key, label in CONTAINER_LISTS:
        items = spec.get(key)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                continue
            name = item.get("name")
            resources = _mapping(item.get("resources"))
            yield ContainerRef(
                path=f"{spec_path}.{key}[{index}]",
                label=label,
                name=name if isinstance(name, str) and name else f"#{index}",
                limits=_mapping(resources.get("limits")),
                requests=_mapping(resources.get("requests")),
            )


def is_gpu_resource(name: object) -> bool:
    return isinstance(name, str) and name.startswith(c.GPU_RESOURCE_PREFIX)


def requests_gpu_sharing(obj: Mapping[str, Any]) -> bool:
    """Fast check: does any container of the object's pod spec mention an ``aliyun.com/gpu*`` resource?"""
    for path, spec in pod_specs(obj):
        for container in iter_containers(path, spec):
            if any(is_gpu_resource(k) for k in container.limits) or any(
                is_gpu_resource(k) for k in container.requests
            ):
                return True
    return False
