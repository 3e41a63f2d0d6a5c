"""The GPUSharePool API (gpushare.io/v1alpha1) as pydantic models, and the CRD generated from them."""

from gpushare.api.v1alpha1 import (
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
    Resources,
    Rollout,
    parse_pool,
)

__all__ = [
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
    "Resources",
    "Rollout",
    "parse_pool",
]
