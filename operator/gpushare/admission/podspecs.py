"""Find the pod specs inside Kubernetes objects (Pods and the templates of workload controllers)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpushare import constants as c
from gpushare.admission.cel import (
    POD_CONTAINER_LISTS,
    POD_LABEL_GPU_COUNT,
    Step,
    parse_path,
    pod_metadata_path,
)

#: Where each kind keeps its pod specs: paths from the object root (``name[]`` = every item of a
#: list, ``*`` = every value of a map; see :mod:`gpushare.admission.cel`). The rules, ``gpushare
#: check``, the webhook's matchConditions and the ValidatingAdmissionPolicy all read this table.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template.spec",),
    "ReplicationController": ("spec.template.spec",),
    "ReplicaSet": ("spec.template.spec",),
    "Deployment": ("spec.template.spec",),
    "StatefulSet": ("spec.template.spec",),
    "DaemonSet": ("spec.template.spec",),
    "Job": ("spec.template.spec",),
    "CronJob": ("spec.jobTemplate.spec.template.spec",),
}

#: Container lists that can request resources, with the word used in messages.
CONTAINER_LISTS: tuple[tuple[str, str], ...] = POD_CONTAINER_LISTS


def _expand(node: Any, steps: Sequence[Step], where: str) -> Iterator[tuple[str, Any]]:
    """Every ``(concrete path, value)`` a wildcard path reaches; missing or mistyped steps reach nothing."""
    if not steps:
        yield where, node
        return
    step, rest = steps[0], steps[1:]
    if not isinstance(node, Mapping):
        return
    if step.field is None:
        for key, value in node.items():
            yield from _expand(value, rest, f"{where}.{key}")
        return
    child = node.get(step.field)
    here = f"{where}.{step.field}" if where else step.field
    if not step.items:
        yield from _expand(child, rest, here)
        return
    if isinstance(child, list):
        for index, item in enumerate(child):
            yield from _expand(item, rest, f"{here}[{index}]")


def _kind_paths(obj: Mapping[str, Any]) -> tuple[str, ...]:
    kind = obj.get("kind")
    return POD_SPEC_PATHS.get(kind, ()) if isinstance(kind, str) else ()


def pod_specs(obj: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``[(path, podspec)]`` for a Pod or a workload's pod templates; ``[]`` for other kinds.

    ``path`` is the dotted location of the spec (``spec.template.spec``). Malformed objects (a
    missing or non-object spec) give ``[]`` rather than an exception.
    """
    out: list[tuple[str, dict[str, Any]]] = []
    for path in _kind_paths(obj):
        out.extend(
            (where, node) for where, node in _expand(obj, parse_path(path), "") if isinstance(node, dict)
        )
    return out


def pod_labels(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The labels of the pod or of each pod template (the sibling ``metadata`` of each pod spec)."""
    out: list[Mapping[str, Any]] = []
    for path in _kind_paths(obj):
        meta = pod_metadata_path(path)
        if meta is None:
            continue
        for _, node in _expand(obj, parse_path(meta), ""):
            labels = node.get("labels") if isinstance(node, Mapping) else None
            if isinstance(labels, Mapping):
                out.append(labels)
    return out


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
    """Containers, init and ephemeral containers of a pod spec; entries that are not objects are skipped."""
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
    """Fast check: does any container of the object's pod specs mention an ``aliyun.com/gpu*`` resource,
    or does the pod carry ACK's multi-GPU label ``aliyun.com/gpu-count``? (The webhook's
    matchConditions, :func:`gpushare.admission.cel.gpu_sharing_condition`, ask the same.)"""
    if any(POD_LABEL_GPU_COUNT in labels for labels in pod_labels(obj)):
        return True
    for path, spec in pod_specs(obj):
        for container in iter_containers(path, spec):
            if any(is_gpu_resource(k) for k in container.limits) or any(
                is_gpu_resource(k) for k in container.requests
            ):
                return True
    return False
