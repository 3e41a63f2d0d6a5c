"""GPU-sharing backends behind one seam (``gpushare.backends.base.SharingBackend``).

``backend_for(spec)`` is the backend of a pool; ``DEFAULT`` serves a node that belongs to no
pool any more (it is restored by the backend that labelled it). ``OWNED_LABELS``: every node label
a backend may write, with ``gpushare.io/pool``: all the operator ever touches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.ack import ACK
from gpushare.backends.base import GpuSize, SharingBackend
from gpushare.backends.nvidia import MIG, NVIDIA, physical_gpus

#: Every backend, by name.
BACKENDS: Final[dict[str, SharingBackend]] = {ACK.name: ACK, NVIDIA.name: NVIDIA, MIG.name: MIG}
#: The backend of a node whose pool is gone.
DEFAULT: Final[SharingBackend] = ACK
#: Every node label the operator may write (the backends' and ``gpushare.io/pool``).
OWNED_LABELS: Final = (*dict.fromkeys(k for b in BACKENDS.values() for k in b.owned_labels), c.LABEL_POOL)


def backend_for(spec: GPUSharePoolSpec | None) -> SharingBackend:
    """The backend of a pool with ``spec``: NVIDIA's MIG backend with ``spec.nvidia.mig``, NVIDIA's
    with ``spec.nvidia``, else ACK's."""
    if spec is None or spec.nvidia is None:
        return ACK
    return MIG if spec.nvidia.mig is not None else NVIDIA


def gpus_of(labels: Mapping[str, str], allocatable: Mapping[str, str], spec: GPUSharePoolSpec) -> int:
    """A node's physical GPUs (0: unknown), in a pool with ``spec``: the node agent's or GPU
    Feature Discovery's label, else the first backend whose plugin's allocatable says it."""
    found = physical_gpus(labels)
    if found:
        return found
    return next((n for b in BACKENDS.values() if (n := b.counted_gpus(spec, allocatable))), 0)


def backend_of_node(labels: Mapping[str, str]) -> SharingBackend:
    """The backend whose mode label a node carries (another backend's before the default's, whose
    restored label a node may keep), else the default: how ``inspect`` reads a node."""
    return next((b for b in BACKENDS.values() if b is not DEFAULT and b.mode_label in labels), DEFAULT)


def advertised_gpus(allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The GPUs and GPU memory a node's device plugin advertises, as the first backend that reads
    either from ``allocatable`` says (``SharingBackend.advertised_gpus``)."""
    for backend in BACKENDS.values():
        gpus, memory = backend.advertised_gpus(allocatable)
        if gpus is not None or memory is not None:
            return gpus, memory
    return None, None


__all__ = [
    "BACKENDS",
    "DEFAULT",
    "OWNED_LABELS",
    "GpuSize",
    "SharingBackend",
    "advertised_gpus",
    "backend_for",
    "backend_of_node",
    "gpus_of",
]
