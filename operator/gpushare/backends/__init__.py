"""GPU-sharing backends behind one seam (``gpushare.backends.base.SharingBackend``).

``backend_for(spec)`` is the backend of a pool; ``DEFAULT`` serves a node that belongs to no
pool any more (it is restored by the backend that labelled it). ``OWNED_LABELS``: every node label
a backend may write, with ``gpushare.io/pool``: all the operator ever touches.
"""

from __future__ import annotations

from typing import Final

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.ack import ACK
from gpushare.backends.base import SharingBackend
from gpushare.backends.nvidia import NVIDIA

#: Every backend, by name.
BACKENDS: Final[dict[str, SharingBackend]] = {ACK.name: ACK, NVIDIA.name: NVIDIA}
#: The backend of a node whose pool is gone.
DEFAULT: Final[SharingBackend] = ACK
#: Every node label the operator may write (the backends' and ``gpushare.io/pool``).
OWNED_LABELS: Final = (*dict.fromkeys(k for b in BACKENDS.values() for k in b.owned_labels), c.LABEL_POOL)


def backend_for(spec: GPUSharePoolSpec | None) -> SharingBackend:
    """The backend of a pool with ``spec``: NVIDIA's with ``spec.nvidia``, else ACK's."""
    return NVIDIA if spec is not None and spec.nvidia is not None else ACK


__all__ = ["BACKENDS", "DEFAULT", "OWNED_LABELS", "SharingBackend", "backend_for"]
