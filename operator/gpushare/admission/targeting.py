"""Which pools a pod can land on, for the callers outside the rules (demand, ``inspect``, ``check``).

A pod's node constraints are read by :mod:`gpushare.rulekit.constraints`; resolving them against
the pools and nodes (the kinds of pool a node's labels give it) is the backend's reading,
:mod:`gpushare.backends.ack.admission.targeting`.
"""

from __future__ import annotations

from gpushare.backends.ack.admission.targeting import Resolution, node_kind, pool_node_labels, resolve
from gpushare.rulekit.constraints import Constraints, names_nodes, node_constraints

__all__ = [
    "Constraints",
    "Resolution",
    "names_nodes",
    "node_constraints",
    "node_kind",
    "pool_node_labels",
    "resolve",
]
