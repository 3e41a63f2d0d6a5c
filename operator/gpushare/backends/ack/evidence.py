"""Which GPU mode a node's device plugin is really in, judged from what the node advertises.

ACK's gpushare device plugin reads the node's labels only when it starts, and then advertises
the extended resources of that mode (the other modes' resources are 0). So a node's labels say
what it *should* be; its ``status.allocatable`` says what its plugin *is*:

=====================  =============================================================
effective mode          allocatable
=====================  =============================================================
``core_mem``            ``aliyun.com/gpu-mem`` > 0 and ``aliyun.com/gpu-core.percentage`` > 0
``cgpu|share``          ``aliyun.com/gpu-mem`` > 0, no ``gpu-core.percentage`` (cgpu, share, mps
                        advertise the same resources: the difference is in the container env)
``default``             ``nvidia.com/gpu`` > 0 (or ``aliyun.com/gpu``), no ``gpu-mem``
``none``                no GPU resource at all (the plugin has not registered)
=====================  =============================================================

The node phases and reasons these checks lead to are in ``gpushare.policy.conditions``.

Pure: no client, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from gpushare import constants as c
from gpushare.api.quantity import integer_or_none, quantity_int

RES_NVIDIA_GPU: Final = c.RES_NVIDIA_GPU
RES_ALIYUN_GPU: Final = "aliyun.com/gpu"

EFFECTIVE_CORE_MEM: Final = "core_mem"
EFFECTIVE_MEMORY: Final = "cgpu|share"
EFFECTIVE_DEFAULT: Final = "default"
EFFECTIVE_NONE: Final = "none"

#: The resources a device plugin registers with the kubelet (``gpu-count`` is patched, not registered).
PLUGIN_RESOURCES: Final = (c.RES_GPU_MEM, c.RES_GPU_CORE, RES_NVIDIA_GPU, RES_ALIYUN_GPU)

_DESCRIBE: Final = {
    EFFECTIVE_CORE_MEM: "core_mem resources (aliyun.com/gpu-mem and gpu-core.percentage)",
    EFFECTIVE_MEMORY: "cgpu/share resources (aliyun.com/gpu-mem, no gpu-core.percentage)",
    EFFECTIVE_DEFAULT: "exclusive-mode resources (nvidia.com/gpu, no aliyun.com/gpu-mem)",
    EFFECTIVE_NONE: "no GPU resources",
}


def _int(allocatable: Mapping[str, str], name: str) -> int:
    return quantity_int(allocatable.get(name, 0))


def effective_mode(allocatable: Mapping[str, str]) -> str:
    """The mode the node's device plugin advertises (see the module table)."""
    if _int(allocatable, c.RES_GPU_MEM) > 0:
        return EFFECTIVE_CORE_MEM if _int(allocatable, c.RES_GPU_CORE) > 0 else EFFECTIVE_MEMORY
    if _int(allocatable, RES_NVIDIA_GPU) > 0 or _int(allocatable, RES_ALIYUN_GPU) > 0:
        return EFFECTIVE_DEFAULT
    return EFFECTIVE_NONE


def expected_effective_mode(mode: str) -> str:
    """What a node labelled ``ack.node.gpu.schedule=mode`` advertises once its plugin restarted."""
    if mode == c.SCHEDULE_CORE_MEM:
        return EFFECTIVE_CORE_MEM
    if mode in (c.SCHEDULE_CGPU, c.SCHEDULE_SHARE, "mps"):
        return EFFECTIVE_MEMORY
    return EFFECTIVE_DEFAULT


def advertises(mode: str, allocatable: Mapping[str, str]) -> bool:
    """True when the node advertises what ``mode`` implies: ``gpu-mem`` > 0 for every sharing
    mode, ``gpu-core.percentage`` > 0 under ``core_mem`` and 0/absent elsewhere."""
    return effective_mode(allocatable) == expected_effective_mode(mode)


def plugin_unregistered(capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
    """True when the kubelet knows the device plugin's resources (they are in ``capacity``) but none
    is allocatable: the plugin is not registered right now.

    That is what a real kubelet shows when a plugin's ListAndWatch stream ends (its pod deleted or
    restarting, or hung): every device turns unhealthy, allocatable drops to 0 at the next status
    sync while capacity stays (for 5 minutes); and after a kubelet restart, until the plugin
    registers again, both read 0. The kubelet refuses GPU pods on the node meanwhile.
    """
    return effective_mode(allocatable) == EFFECTIVE_NONE and any(r in capacity for r in PLUGIN_RESOURCES)


def unregistered_message(capacity: Mapping[str, str]) -> str:
    listed = ", ".join(f"{r}={capacity[r]}" for r in PLUGIN_RESOURCES if r in capacity)
    return (
        f"the kubelet lists the device plugin's resources (capacity {listed}) but none is allocatable: "
        "the plugin is not registered (its pod deleted, restarting or hung, or the kubelet restarted); "
        "the kubelet refuses GPU pods on this node until it registers again"
    )


def describe(effective: str) -> str:
    return _DESCRIBE.get(effective, effective)


def stale_message(mode: str, allocatable: Mapping[str, str]) -> str:
    """Why a node labelled for ``mode`` is not in it yet (for the pool's node status)."""
    return (
        f"node advertises {describe(effective_mode(allocatable))} after switching to {mode}; "
        "the device plugin has not picked up the labels"
    )


#: Pod annotations that say which GPU a pod got (gpushare v1 protocol; ACK scheduler v2).
ANNOTATION_GPU_IDX: Final = "ALIYUN_COM_GPU_MEM_IDX"
ANNOTATION_ALLOCATION_V2: Final = "scheduler.framework.gpushare.allocation"


def allocated_gpus(annotations: Mapping[str, str]) -> str:
    """The GPU index(es) a pod got, from the allocation annotations (v1 or v2), else ""."""
    idx = annotations.get(ANNOTATION_GPU_IDX)
    if isinstance(idx, str) and idx.strip():
        return idx.strip()
    raw = annotations.get(ANNOTATION_ALLOCATION_V2)
    if isinstance(raw, str):
        try:
            alloc = json.loads(raw)
        except ValueError:
            return ""
        if isinstance(alloc, dict):
            gpus = sorted({str(g) for per in alloc.values() if isinstance(per, dict) for g in per})
            return ",".join(gpus)
    return ""


def _count(value: object) -> int | None:
    """A count the node reports: a whole number >= 0, else unknown (None)."""
    number = integer_or_none(value)
    return number if number is not None and number >= 0 else None


def advertised_gpus(allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The node's GPUs (``aliyun.com/gpu-count``, which the plugin patches in) and their memory
    together (``aliyun.com/gpu-mem``, in the plugin's unit), as advertised."""
    return _count(allocatable.get(c.RES_GPU_COUNT)), _count(allocatable.get(c.RES_GPU_MEM))
