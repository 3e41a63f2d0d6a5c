"""The GPUSharePool API (gpushare.io/v1alpha1) as pydantic models, and the CRD generated from them."""

from gpushare.api.v1alpha1 import (
    STATUS_RESOURCES,
    Admission,
    Condition,
    DevicePlugin,
    GPUSharePool,
    GPUSharePoolSpec,
    GPUSharePoolStatus,
    LabelSelector,
    LabelSelectorRequirement,
    NodeCounts,
    NodeStatus,
    PoolValidationError,
    Rollout,
    parse_pool,
)

__all__ = [
    "STATUS_RESOURCES",
    "Admission",
    "Condition",
    "DevicePlugin",
    "GPUSharePool",
    "GPUSharePoolSpec",
    "GPUSharePoolStatus",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeCounts",
    "NodeStatus",
    "PoolValidationError",
    "Rollout",
    "parse_pool",
]
