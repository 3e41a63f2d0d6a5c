"""Pure desired-state logic: which labels a node should carry, what to patch, how to report.

Nothing here imports Kopf or a Kubernetes client, reads a clock or does I/O: the callers pass the
observed objects (as plain dicts turned into views) and ``now``, and get plain data back.
"""

from __future__ import annotations

from gpushare.policy.planner import (
    Action,
    ClusterPlan,
    NodePlan,
    Ownership,
    RestartRecord,
    apply_node_patch,
    desired_labels,
    plan,
    restore_labels,
    selector_problem,
)
from gpushare.policy.views import NodeView, PodView

__all__ = [
    "Action",
    "ClusterPlan",
    "NodePlan",
    "NodeView",
    "Ownership",
    "PodView",
    "RestartRecord",
    "apply_node_patch",
    "desired_labels",
    "plan",
    "restore_labels",
    "selector_problem",
]
