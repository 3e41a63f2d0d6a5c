"""The admission rules engine (pure): the webhook and ``gpushare check`` both call :func:`evaluate`.

Rule ids are stable (``GSnnn-*`` for pods and workloads, ``GPnnn-*`` for GPUSharePools); the
table is :data:`RULES` (:mod:`gpushare.admission.catalog`) and docs/reference/admission-rules.md.
"""

from gpushare.admission.catalog import RULES, AdmissionRule, Verdict
from gpushare.admission.catalog import AdmissionRule as Rule
from gpushare.admission.kinds import (
    BUILTIN_KINDS,
    DEFAULT_TABLE,
    KindsError,
    KindTable,
    WorkloadKind,
    kind_targets,
    load_kinds,
    object_name,
    table_with,
)
from gpushare.admission.model import EMPTY_CONTEXT, Context, Finding, NodeInfo, node_info
from gpushare.admission.podspecs import pod_specs, requests_gpu_sharing
from gpushare.admission.quantity import Amount, parse_amount
from gpushare.admission.rules import evaluate, evaluate_pool, is_denied
from gpushare.admission.targeting import pool_node_labels

__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_TABLE",
    "EMPTY_CONTEXT",
    "RULES",
    "AdmissionRule",
    "Amount",
    "Context",
    "Finding",
    "KindTable",
    "KindsError",
    "NodeInfo",
    "Rule",
    "Verdict",
    "WorkloadKind",
    "evaluate",
    "evaluate_pool",
    "is_denied",
    "kind_targets",
    "load_kinds",
    "node_info",
    "object_name",
    "parse_amount",
    "pod_specs",
    "pool_node_labels",
    "requests_gpu_sharing",
    "table_with",
]
