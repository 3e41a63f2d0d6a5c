"""Nodes as the admission rules see them, read through the backends; the rules' plain data.

The data (findings, nodes, the context) is :mod:`gpushare.rulekit.model`, below the backends. A
node built here (:func:`node_of`, :func:`node_info`) also carries what its device plugin
advertises of its GPUs, as the backends read its allocatable (``gpushare.backends.advertised_gpus``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpushare.backends import advertised_gpus
from gpushare.rulekit.model import EMPTY_CONTEXT, Context, Finding, NodeInfo


def node_of(
    name: str, labels: Mapping[str, Any], allocatable: Mapping[str, Any], annotations: Mapping[str, Any]
) -> NodeInfo:
    """A NodeInfo from a Node's parts (its object, or the operator's projection of it)."""
    return NodeInfo.of(name, labels, allocatable, annotations, advertised_gpus)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """A NodeInfo from a Node object (Kubernetes JSON); tolerant of missing parts."""
    meta = _map(obj.get("metadata"))
    return node_of(
        str(meta.get("name") or ""),
        _map(meta.get("labels")),
        _map(_map(obj.get("status")).get("allocatable")),
        _map(meta.get("annotations")),
    )


__all__ = ["EMPTY_CONTEXT", "Context", "Finding", "NodeInfo", "node_info", "node_of"]
