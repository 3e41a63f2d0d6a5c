"""The webhook's matchConditions, from the workload-kinds table and the backends (pure, no client).

:func:`gpu_sharing_condition` is the ``matchConditions`` expression of the webhook (is GPU sharing
asked for anywhere in the object?), so objects without it never reach the webhook: a container
asking for a resource only GPU-sharing pods request (``SharingBackend.sharing_prefixes``), a pod
carrying a label that asks for GPU sharing (``SharingBackend.pod_labels``), and NVIDIA's requests
as the gate (:mod:`gpushare.admission.gate`) lets them through. :func:`gpu_sharing_anywhere` is
the condition of a ValidatingAdmissionPolicy over several kinds. The building blocks (paths,
walks, values) are :mod:`gpushare.rulekit.cel`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from gpushare import constants as c
from gpushare.backends import BACKENDS
from gpushare.backends.nvidia.admission.cel import AIMED_NAMES, AIMED_PREFIXES
from gpushare.rulekit.cel import (
    KindPaths,
    Vars,
    container_asks,
    exists_at,
    is_resource,
    names_in,
    string_literal,
)

#: Prefixes of the resources that only GPU-sharing pods request (every backend's).
SHARING_PREFIXES: tuple[str, ...] = tuple(
    dict.fromkeys(p for b in BACKENDS.values() for p in b.sharing_prefixes)
)
#: Pod labels that ask for GPU sharing without any resource (every backend's).
SHARING_POD_LABELS: tuple[str, ...] = tuple(dict.fromkeys(k for b in BACKENDS.values() for k in b.pod_labels))


#: Pod spec fields that constrain its nodes (podspecs.NODE_CONSTRAINT_FIELDS).
_CONSTRAINT_FIELDS = ("nodeSelector", "affinity", "nodeName")


def _nvidia_shared_parts(kind: KindPaths) -> list[str]:
    """A container asking for ``nvidia.com/gpu.shared`` (only sharing users create such pods:
    NVIDIA's plugin advertises the name with ``renameByDefault``)."""
    return [
        exists_at(path, lambda x: names_in(x, (c.RES_NVIDIA_GPU_SHARED,)))
        for path, _ in kind.all_containers()
    ]


def _nvidia_gpu_parts(kind: KindPaths) -> list[str]:
    """A container asking for what aims a pod at an NVIDIA pool only with node constraints
    (``nvidia.com/gpu``, or a device of NVIDIA's ``AIMED_PREFIXES``) in a pod spec with its own
    nodeSelector, affinity or nodeName (a pod that may be aimed at an NVIDIA pool)."""
    parts = []
    for spec in kind.pod_specs:
        rels = [p.removeprefix(spec + ".") for p, _ in kind.all_containers() if p.startswith(spec + ".")]
        if not rels:
            continue
        fresh = Vars()

        def whole(node: str, rels: list[str] = rels, fresh: Vars = fresh) -> str:
            constrained = " || ".join(f"has({node}.{f})" for f in _CONSTRAINT_FIELDS)
            asks = " || ".join(
                exists_at(
                    rel,
                    lambda x: f"({names_in(x, AIMED_NAMES)} || {container_asks(x, AIMED_PREFIXES)})",
                    node,
                    fresh,
                )
                for rel in rels
            )
            return f"({constrained}) && ({asks})"

        parts.append(exists_at(spec, whole, fresh=fresh))
    return parts


def _carries(label: str) -> Callable[[str], str]:
    """A pod's label map ``m`` has ``label``."""
    return lambda m: f"{string_literal(label)} in {m}"


#: How much of NVIDIA's requests a condition matches: none (the policy's over built-in kinds),
#: ``nvidia.com/gpu.shared`` only (the shipped webhook configuration's), or also ``nvidia.com/gpu``
#: in a pod spec with node constraints (the webhook's while the cluster has an NVIDIA pool;
#: ``gpushare.admission.gate``), or any ``nvidia.com/*`` resource (the policy's over custom kinds,
#: whose quantities no apiserver validation reads: ``NVIDIA_QUANTITY``).
NvidiaMatch = Literal["none", "shared", "all", "quantities"]

#: The API groups whose pod templates the apiserver validates itself (Pods, the apps and batch
#: kinds: pkg/apis/core/validation runs on them before admission); every other kind is custom.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})


def is_custom(kind: KindPaths) -> bool:
    """A kind whose pod templates no apiserver validation reads (a custom resource)."""
    return kind.group not in BUILT_IN_GROUPS


def gpu_sharing_condition(kind: KindPaths, nvidia: NvidiaMatch = "none") -> str:
    """The webhook's matchCondition: does the object ask for GPU sharing anywhere (a container's
    resource of :data:`SHARING_PREFIXES`, or a pod label of :data:`SHARING_POD_LABELS`)? ``nvidia``
    adds NVIDIA's requests (:data:`NvidiaMatch`; :func:`gpushare.admission.podspecs.
    requests_gpu_sharing` asks what ``"all"`` asks); the policy's condition leaves them out (its
    rules judge the containers of :data:`SHARING_PREFIXES` only)."""
    prefixes = (*SHARING_PREFIXES, c.RES_NVIDIA_PREFIX) if nvidia == "quantities" else SHARING_PREFIXES
    parts = [exists_at(path, lambda x: container_asks(x, prefixes)) for path, _ in kind.all_containers()]
    parts.extend(exists_at(path, _carries(label)) for path in kind.labels for label in SHARING_POD_LABELS)
    if nvidia in ("shared", "all"):
        parts.extend(_nvidia_shared_parts(kind))
    if nvidia == "all":
        parts.extend(_nvidia_gpu_parts(kind))
    if not parts:
        return "object != null"  # nothing known to look at: match everything
    return "object != null && (" + " || ".join(parts) + ")"


def gpu_sharing_anywhere(kinds: Sequence[KindPaths], nvidia_quantities: bool = False) -> str:
    """matchCondition for a policy over several kinds: the GPU-sharing condition of the request's
    kind only (a chain on its group and resource; kinds with the same paths share one condition);
    with ``nvidia_quantities``, a custom kind's containers asking for ``nvidia.com/*`` too."""
    shared: dict[str, list[KindPaths]] = {}
    for k in kinds:
        nvidia: NvidiaMatch = "quantities" if nvidia_quantities and is_custom(k) else "none"
        condition = gpu_sharing_condition(k, nvidia).removeprefix("object != null && ")
        shared.setdefault(condition, []).append(k)
    if len(shared) == 1:
        # one condition for every kind (a policy of one kind): no test of the request's resource
        return f"object != null && {next(iter(shared))}"
    text = "false"
    for condition, same in reversed(list(shared.items())):
        text = f"({is_resource(same)} ? {condition} : {text})"
    return f"object != null && {text}"
