"""The webhook's fast gate: does an object ask for GPU sharing at all (:func:`requests_gpu_sharing`)?

It asks what the webhook's matchConditions ask (:func:`gpushare.admission.cel.gpu_sharing_condition`
with ``nvidia="all"``), with the backends' resources and pod labels
(:data:`gpushare.admission.cel.SHARING_PREFIXES`, :data:`~gpushare.admission.cel.SHARING_POD_LABELS`).
Finding the pods is :mod:`gpushare.rulekit.podspecs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpushare import constants as c
from gpushare.admission.cel import SHARING_POD_LABELS, SHARING_PREFIXES
from gpushare.backends.nvidia.admission.cel import AIMED_NAMES, AIMED_PREFIXES
from gpushare.rulekit.kinds import DEFAULT_TABLE, KindTable
from gpushare.rulekit.podspecs import NODE_CONSTRAINT_FIELDS, gate_paths, has_prefix, pod_specs, values_at


def requests_gpu_sharing(obj: Mapping[str, Any], table: KindTable = DEFAULT_TABLE) -> bool:
    """Fast check: does any container of the object's pods mention a resource of a backend's
    ``sharing_prefixes`` or ``nvidia.com/gpu.shared``, does a container ask for what aims a pod at an
    NVIDIA pool (``nvidia.com/gpu``, or a device of NVIDIA's ``AIMED_PREFIXES``) in a pod spec with
    its own nodeSelector, affinity or nodeName (a pod that may be aimed at a pool),
    or does a pod carry a backend's GPU-sharing pod label? (The webhook's matchConditions,
    :func:`gpushare.admission.cel.gpu_sharing_condition` with ``nvidia``, ask the same.)

    It runs on every review the webhook gets, so it only reads: the kind's paths are parsed once
    (:func:`gpushare.rulekit.podspecs.gate_paths`), and the containers are looked at where
    :func:`gpushare.rulekit.podspecs.pod_likes` finds them without building them."""
    kind = table.lookup(obj)
    if kind is None:
        return False
    labels, sources = gate_paths(kind)
    # The labels where the CEL looks for them, whether or not the pod spec beside them exists.
    for steps in labels:
        if any(
            isinstance(found, Mapping) and any(label in found for label in SHARING_POD_LABELS)
            for found in values_at(obj, steps)
        ):
            return True
    for steps, containers in sources:
        for node in values_at(obj, steps):
            if not isinstance(node, Mapping):
                continue
            constrained = any(k in node for k in NODE_CONSTRAINT_FIELDS)
            if any(_names_gpu(item, constrained) for rel in containers for item in values_at(node, rel)):
                return True
    return False


def _names_gpu(item: Any, constrained: bool = False) -> bool:
    """A container whose resources name a resource of :data:`SHARING_PREFIXES` or
    ``nvidia.com/gpu.shared``, or what NVIDIA's ``AIMED_NAMES`` and ``AIMED_PREFIXES`` name when its
    pod spec is ``constrained``."""
    resources = item.get("resources") if isinstance(item, Mapping) else None
    if not isinstance(resources, Mapping):
        return False
    return any(
        isinstance(names, Mapping)
        and any(
            has_prefix(name, SHARING_PREFIXES)
            or name == c.RES_NVIDIA_GPU_SHARED
            or (constrained and (name in AIMED_NAMES or has_prefix(name, AIMED_PREFIXES)))
            for name in names
        )
        for names in (resources.get("limits"), resources.get("requests"))
    )


__all__ = ["pod_specs", "requests_gpu_sharing"]
