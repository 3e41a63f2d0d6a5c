"""Find the pods inside Kubernetes objects, by the workload-kinds table (:mod:`.kinds`; pure).

A :class:`PodLike` is one pod template: its location, the fields that constrain its nodes
(``nodeSelector``, ``affinity``, ``nodeName``, inherited where the kind says so), its labels and its
containers. Malformed objects (a missing or non-object part) give fewer pods, never an exception.
Which resources or labels ask for GPU sharing is the backends' word (``gpushare.admission.podspecs``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpushare.rulekit.kinds import (
    DEFAULT_TABLE,
    POD_CONTAINERS,
    KindTable,
    PodSource,
    WorkloadKind,
    container_key,
    container_label,
    parse_path,
    pod_labels_path,
    resolve_relative,
    walk,
)

#: The pod spec fields that constrain its nodes: an NVIDIA GPU pod with none of them is aimed at
#: no pool (whole GPUs anywhere), and the webhook is not sent it.
NODE_CONSTRAINT_FIELDS: tuple[str, ...] = ("nodeSelector", "affinity", "nodeName")

#: Scheduling fields a pod-like may inherit (Argo: the workflow's, when the template has none).
SCHEDULING_FIELDS: tuple[str, ...] = ("nodeSelector", "affinity", "tolerations")


@dataclass(frozen=True)
class ContainerRef:
    """One container of a pod: where it is, what it is called, its resources maps and env."""

    path: str  # e.g. spec.template.spec.containers[0]
    label: str  # "container", "init container", "script", "sidecar", ...
    name: str
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]
    env: tuple[Mapping[str, Any], ...] = ()
    #: ``restartPolicy: Always``: an init container that keeps running (a sidecar, KEP-753).
    restart_always: bool = False

    @property
    def display(self) -> str:
        return f'{self.label} "{self.name}"'

    @property
    def init(self) -> bool:
        """Init containers run one after another, before the others (their memory is not added)."""
        return self.label == "init container"


@dataclass(frozen=True)
class PodLike:
    """One pod template inside an object."""

    path: str
    #: The node-constraint fields as the pods will have them (after inheritance).
    spec: Mapping[str, Any]
    #: Where those constraints are written, for messages (the inherited spec's path when inherited).
    constraints_path: str
    labels: Mapping[str, Any]
    labels_path: str
    containers: tuple[ContainerRef, ...] = field(default_factory=tuple)
    #: Whether the pod-like's own fields constrain its nodes (nodeSelector, affinity or nodeName,
    #: not inherited): what the webhook's matchConditions read for whole-GPU requests.
    own_constraints: bool = False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _container_ref(path: str, item: Mapping[str, Any], rel: str, index: int | None) -> ContainerRef:
    name = item.get("name")
    resources = _mapping(item.get("resources"))
    env = item.get("env")
    key = container_key(rel)
    # Argo names the container of a container/script template "main"; KServe the model's "kserve-container".
    default = f"#{index}" if index is not None else ("main" if key in ("container", "script") else key)
    return ContainerRef(
        path=path,
        label=container_label(rel),
        name=name if isinstance(name, str) and name else default,
        limits=_mapping(resources.get("limits")),
        requests=_mapping(resources.get("requests")),
        env=tuple(e for e in env if isinstance(e, Mapping)) if isinstance(env, list) else (),
        restart_always=item.get("restartPolicy") == "Always",
    )


def containers_at(base: str, node: Mapping[str, Any], rel: str) -> Iterator[ContainerRef]:
    """Containers at ``rel`` (a path relative to the pod-like ``node`` at ``base``)."""
    for path, item in walk(node, parse_path(rel), base):
        if not isinstance(item, Mapping):
            continue
        index = int(path.rsplit("[", 1)[1].rstrip("]")) if path.endswith("]") else None
        yield _container_ref(path, item, rel, index)


def iter_containers(spec_path: str, spec: Mapping[str, Any]) -> Iterator[ContainerRef]:
    """Containers, init and ephemeral containers of a PodSpec; entries that are not objects are skipped."""
    for rel in POD_CONTAINERS:
        yield from containers_at(spec_path, spec, rel)


def _pod_like(obj: Mapping[str, Any], path: str, node: Mapping[str, Any], source: PodSource) -> PodLike:
    containers = tuple(ref for rel in source.containers for ref in containers_at(path, node, rel))
    spec: dict[str, Any] = {k: node[k] for k in (*SCHEDULING_FIELDS, "nodeName") if k in node}
    constraints_path = path
    if source.inherit is not None:
        parent = next((v for _, v in walk(obj, parse_path(source.inherit))), None)
        if isinstance(parent, Mapping):
            inherited = {k: parent[k] for k in SCHEDULING_FIELDS if k not in spec and k in parent}
            if inherited and not any(k in spec for k in ("nodeSelector", "affinity")):
                constraints_path = source.inherit
            spec.update(inherited)
    labels = resolve_relative(obj, path, source.labels)
    labels_path = pod_labels_path(path, source.labels)
    own = any(k in node for k in NODE_CONSTRAINT_FIELDS)
    return PodLike(path, spec, constraints_path, _mapping(labels), labels_path, containers, own)


def pod_likes(obj: Mapping[str, Any], table: KindTable = DEFAULT_TABLE) -> list[PodLike]:
    """Every pod template of ``obj`` by the kinds table; ``[]`` for kinds not in it."""
    kind = table.lookup(obj)
    if kind is None:
        return []
    out = []
    for source in kind.sources:
        for path, node in walk(obj, parse_path(source.path)):
            if isinstance(node, Mapping):
                out.append(_pod_like(obj, path, node, source))
    return out


def pod_specs(obj: Mapping[str, Any], table: KindTable = DEFAULT_TABLE) -> list[tuple[str, dict[str, Any]]]:
    """``[(path, podspec)]`` of a Pod or a workload's pod templates; ``[]`` for other kinds."""
    kind = table.lookup(obj)
    if kind is None:
        return []
    return [
        (path, node)
        for source in kind.sources
        for path, node in walk(obj, parse_path(source.path))
        if isinstance(node, dict)
    ]


def has_prefix(name: object, prefixes: tuple[str, ...]) -> bool:
    """A resource name that starts with one of ``prefixes``."""
    return isinstance(name, str) and name.startswith(prefixes)


def asks_any(ref: ContainerRef, resources: tuple[str, ...]) -> bool:
    """Does the container ask for one of ``resources`` (by name, in its limits or requests)?"""
    return any(r in ref.limits or r in ref.requests for r in resources)


def asks_prefixed(ref: ContainerRef, prefixes: tuple[str, ...]) -> bool:
    """Does the container ask for a resource whose name starts with one of ``prefixes``?"""
    return any(has_prefix(k, prefixes) for k in ref.limits) or any(
        has_prefix(k, prefixes) for k in ref.requests
    )


def resource_field(where: str, resource: str) -> str:
    """A container's resource, as a finding's field names it below the container's path:
    ``resources.<limits|requests>["<resource>"]``."""
    return f'resources.{where}["{resource}"]'


Steps = tuple[str, ...]


@functools.lru_cache(maxsize=256)
def gate_paths(kind: WorkloadKind) -> tuple[tuple[Steps, ...], tuple[tuple[Steps, tuple[Steps, ...]], ...]]:
    """A kind's label paths and (pod path, container paths), parsed."""
    labels = tuple(parse_path(pod_labels_path(s.path, s.labels)) for s in kind.sources)
    sources = tuple(
        (parse_path(s.path), tuple(parse_path(rel) for rel in s.containers)) for s in kind.sources
    )
    return labels, sources


def values_at(node: Any, steps: Steps) -> Iterator[Any]:
    """The values :func:`walk` reaches, without their paths (steps parsed once: :func:`gate_paths`)."""
    if not steps:
        yield node
        return
    head, rest = steps[0], steps[1:]
    if head == "[*]" or (head == "*" and isinstance(node, list)):
        if isinstance(node, list):
            for item in node:
                yield from values_at(item, rest)
    elif head == "*":
        if isinstance(node, Mapping):
            for value in node.values():
                yield from values_at(value, rest)
    elif isinstance(node, Mapping) and head in node:
        yield from values_at(node[head], rest)


#: How deep :func:`find_container` looks into an object of an unknown kind.
MAX_SCAN_DEPTH = 40


def find_container(node: Any, prefixes: tuple[str, ...], path: str = "", depth: int = 0) -> str | None:
    """The path of the first container-like object (``resources.limits|requests`` naming a
    resource that starts with one of ``prefixes``) anywhere in ``node``, or None. Bounded in depth."""
    if depth > MAX_SCAN_DEPTH:
        return None
    if isinstance(node, Mapping):
        resources = node.get("resources")
        if isinstance(resources, Mapping) and any(
            isinstance(resources.get(k), Mapping) and any(has_prefix(r, prefixes) for r in resources[k])
            for k in ("limits", "requests")
        ):
            return path or "<root>"
        for key, value in node.items():
            if isinstance(value, Mapping | list):
                found = find_container(value, prefixes, f"{path}.{key}" if path else str(key), depth + 1)
                if found is not None:
                    return found
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, Mapping | list):
                found = find_container(item, prefixes, f"{path}[{i}]", depth + 1)
                if found is not None:
                    return found
    return None
