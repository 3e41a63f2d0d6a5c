"""Node and GPU/device-plugin Pod watches feeding the reconciler (all handlers async).

Each Node or relevant Pod event becomes a slim projection (``NodeView.project``: every label,
gpushare's annotations, GPU allocatable; ``PodView`` without labels) handed to
``Reconciler.observe_node``/``observe_pod``, which marks the node dirty and wakes only the pools
it concerns. The ``@kopf.index`` handlers store nothing themselves (they return ``{}``): they are
indexes so that Kopf delivers the initial listing before the pool daemons start. Deletions come
through ``@kopf.on.event`` with a filter on the event type. Handlers are ``async def``: Kopf runs
sync handlers in a thread pool, one hop per event. Kopf writes nothing to Nodes or Pods for these
(no finalizer, no progress or diff-base annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf

from gpushare import constants as c
from gpushare.handlers.state import OperatorState
from gpushare.policy import NodeView, PodView
from gpushare.policy.views import pod_requests
from gpushare.reconciler import pod_key


def _deleted(type: str | None, **_: Any) -> bool:  # noqa: A002
    return type == "DELETED"


@kopf.index("v1", "nodes")
async def gpushare_nodes(body: kopf.Body, memo: OperatorState, **_: Any) -> dict[str, NodeView]:
    memo.reconciler.observe_node(NodeView.project(body))
    return {}


@kopf.on.event("v1", "nodes", when=_deleted)
async def node_deleted(name: str, memo: OperatorState, **_: Any) -> None:
    memo.reconciler.forget_node(name)


def is_gpu_pod(spec: Mapping[str, Any], **_: Any) -> bool:
    return bool(pod_requests(spec))


def is_plugin_pod(labels: Mapping[str, str], **_: Any) -> bool:
    return all(labels.get(k) == v for k, v in c.DEFAULT_PLUGIN_LABELS.items())


def _relevant(spec: Mapping[str, Any], labels: Mapping[str, str], **_: Any) -> bool:
    return is_plugin_pod(labels) or is_gpu_pod(spec)


def _relevant_deleted(spec: Mapping[str, Any], labels: Mapping[str, str], type: str | None, **_: Any) -> bool:  # noqa: A002
    return type == "DELETED" and _relevant(spec, labels)


def _pod(body: kopf.Body) -> PodView:
    """The pod's projection; labels only for device plugin pods (matched by pod selectors)."""
    pod = PodView.from_obj(body)
    return pod if is_plugin_pod(pod.labels) else replace(pod, labels={})


@kopf.index("v1", "pods", when=_relevant)
async def gpushare_pods(body: kopf.Body, memo: OperatorState, **_: Any) -> dict[str, PodView]:
    """GPU pods (for the mode-switch guard and status) and default device plugin pods."""
    memo.reconciler.observe_pod(_pod(body))
    return {}


@kopf.on.event("v1", "pods", when=_relevant_deleted)
async def pod_deleted(body: kopf.Body, memo: OperatorState, **_: Any) -> None:
    memo.reconciler.forget_pod(pod_key(_pod(body)))
