"""Indexes of Nodes and GPU/device-plugin Pods, and wake-ups of the pool loops on changes.

Only ``@kopf.index`` and ``@kopf.on.event`` here: Kopf writes nothing to Nodes or Pods for these
(no finalizer, no progress or diff-base annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from gpushare import constants as c
from gpushare.policy import NodeView, PodView
from gpushare.policy.views import pod_requests

_OURS = (c.ANNOTATION_OWNED, c.ANNOTATION_PLUGIN_RESTART, c.ANNOTATION_CORDONED_BY)


@kopf.index("v1", "nodes")
def gpushare_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeView]:
    return {name: NodeView.from_obj(body)}


def _node_print(view: NodeView) -> tuple[Any, ...]:
    """What can change a plan or a status; heartbeats and the like are left out."""
    return (
        tuple(sorted(view.labels.items())),
        tuple((k, view.annotations.get(k)) for k in _OURS),
        view.unschedulable,
        tuple(sorted(view.allocatable.items())),
        view.ready,
    )


@kopf.on.event("v1", "nodes")
def node_event(name: str, body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:  # noqa: A002
    prints: dict[str, Any] = memo.node_prints
    if type == "DELETED":
        prints.pop(name, None)
        memo.reconciler.wake_all()
        return
    fingerprint = _node_print(NodeView.from_obj(body))
    if prints.get(name) != fingerprint:
        prints[name] = fingerprint
        memo.reconciler.wake_all()


def is_gpu_pod(spec: Mapping[str, Any], **_: Any) -> bool:
    return bool(pod_requests(spec))


def is_plugin_pod(labels: Mapping[str, str], **_: Any) -> bool:
    return all(labels.get(k) == v for k, v in c.DEFAULT_PLUGIN_LABELS.items())


@kopf.index("v1", "pods", when=is_gpu_pod)
def gpushare_gpu_pods(body: kopf.Body, **_: Any) -> dict[str, PodView]:
    pod = PodView.from_obj(body)
    return {pod.node_name: pod} if pod.node_name else {}


@kopf.index("v1", "pods", when=is_plugin_pod)
def gpushare_plugin_pods(body: kopf.Body, **_: Any) -> dict[str, PodView]:
    pod = PodView.from_obj(body)
    return {pod.node_name: pod} if pod.node_name else {}


def _relevant(spec: Mapping[str, Any], labels: Mapping[str, str], **_: Any) -> bool:
    return is_gpu_pod(spec) or is_plugin_pod(labels)


@kopf.on.event("v1", "pods", when=_relevant)
def pod_event(uid: str, body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:  # noqa: A002
    """A GPU pod started/ended or a plugin pod came back: the pools may move on."""
    prints: dict[str, Any] = memo.pod_prints
    if type == "DELETED":
        prints.pop(uid, None)
        memo.reconciler.wake_all()
        return
    pod = PodView.from_obj(body)
    fingerprint = (pod.node_name, pod.phase, pod.ready, pod.deletion)
    if prints.get(uid) != fingerprint:
        prints[uid] = fingerprint
        memo.reconciler.wake_all()
