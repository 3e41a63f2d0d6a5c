"""Which pods NVIDIA's admission rules judge (pure).

A pod asking for ``nvidia.com/gpu.shared`` is always judged (only sharing users create such pods:
NVIDIA's plugin advertises the name with ``renameByDefault``); one asking for ``nvidia.com/gpu``
only when its own fields constrain its nodes (it may be aimed at an NVIDIA pool; whole GPUs
anywhere are none of gpushare's business). The webhook's matchConditions ask the same
(``gpushare.admission.cel.gpu_sharing_condition`` with ``nvidia="all"``).
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.rulekit.podspecs import ContainerRef, PodLike, asks_any

#: NVIDIA's device plugin: whole or time-sliced GPUs, and shared GPUs under renameByDefault.
NVIDIA_RESOURCES: tuple[str, ...] = (c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED)


def asks_nvidia(ref: ContainerRef, resources: tuple[str, ...] = NVIDIA_RESOURCES) -> bool:
    """Does the container ask for one of NVIDIA's GPU resources (``nvidia.com/gpu``,
    ``nvidia.com/gpu.shared``)?"""
    return asks_any(ref, resources)


def judged_nvidia(pod: PodLike) -> bool:
    """Whether the NVIDIA rules judge the pod: a container asks for ``nvidia.com/gpu.shared``, or
    for ``nvidia.com/gpu`` in a pod whose own fields constrain its nodes (the webhook's
    matchConditions ask the same: ``gpushare.admission.podspecs.requests_gpu_sharing``)."""
    if any(asks_nvidia(ref, (c.RES_NVIDIA_GPU_SHARED,)) for ref in pod.containers):
        return True
    return pod.own_constraints and any(asks_nvidia(ref, (c.RES_NVIDIA_GPU,)) for ref in pod.containers)
