"""The admission rules engine (pure): the webhook and ``gpushare check`` both call :func:`evaluate`.

Rule ids are stable (``GSnnn-*`` for pods and workloads, ``GPnnn-*`` for GPUSharePools); the
table is :data:`RULES` (:mod:`gpushare.admission.catalog`) and docs/reference/admission-rules.md.
The rules' building blocks are :mod:`gpushare.rulekit` (below the backends); the backends' own
rules are ``gpushare.backends.ack.admission``. This package assembles and serves them: the one
table, the entry points, the webhook's matchConditions, the ValidatingAdmissionPolicy.
"""

from gpushare.admission.catalog import RULES
from gpushare.admission.model import node_info
from gpushare.admission.podspecs import requests_gpu_sharing
from gpushare.admission.rules import evaluate, evaluate_pool, is_denied
from gpushare.admission.targeting import pool_node_labels
from gpushare.rulekit.kinds import (
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
from gpushare.rulekit.model import EMPTY_CONTEXT, Context, Finding, NodeInfo
from gpushare.rulekit.podspecs import pod_specs
from gpushare.rulekit.quantity import Amount, parse_amount
from gpushare.rulekit.records import AdmissionRule, Verdict
from gpushare.rulekit.records import AdmissionRule as Rule

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
