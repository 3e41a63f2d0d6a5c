"""GPU node inventory through NVML (the agent's read side) and cGPU isolation detection."""

from __future__ import annotations

from gpushare.gpu.inventory import (
    GPU,
    Inventory,
    MigDevice,
    collect_inventory,
    desired_node_metadata,
    gpu_memory_mib,
    inventory_from_annotations,
    isolation_state,
    node_metadata_patch,
)
from gpushare.gpu.isolation import IsolationPaths, detect_cgpu_isolation
from gpushare.gpu.nvml import NVML, NVMLError, PynvmlBackend

__all__ = [
    "GPU",
    "NVML",
    "Inventory",
    "IsolationPaths",
    "MigDevice",
    "NVMLError",
    "PynvmlBackend",
    "collect_inventory",
    "desired_node_metadata",
    "detect_cgpu_isolation",
    "gpu_memory_mib",
    "inventory_from_annotations",
    "isolation_state",
    "node_metadata_patch",
]
