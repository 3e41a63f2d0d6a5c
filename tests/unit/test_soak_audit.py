"""The soak's wait-guard check over audit records (``gpushare.devcluster.soakaudit``): a disrupting
mode write by the operator while a GPU pod is bound to the node is a breach, one right after the
pod's binding is the documented race, and everything else passes."""

from __future__ import annotations

from typing import Any

from gpushare import constants as c
from gpushare.devcluster.soakaudit import mode_changes, occupancies, wait_breaches

OP = "gpushare-operator"
POD = "soak/work-1"
MEM = {POD: {c.RES_GPU_MEM: 1}}


def _at(second: float) -> str:
    return f"2026-12-06T10:00:{second:06.3f}Z"


def _node(
    verb: str, second: float, labels: dict[str, Any], user: str = "admin", code: int = 200
) -> dict[str, Any]:
    body = {"metadata": {"name": "n1", "labels": labels}}
    return {
        "verb": verb,
        "objectRef": {"resource": "nodes", "name": "n1"},
        "user": {"username": user},
        "responseStatus": {"code": code},
        "requestObject": body,
        "stageTimestamp": _at(second),
    }


def _pod(verb: str, second: float, sub: str | None = None, node: str = "n1") -> dict[str, Any]:
    ref = {"resource": "pods", "namespace": "soak", "name": "work-1", **({"subresource": sub} if sub else {})}
    obj = {"target": {"kind": "Node", "name": node}} if sub == "binding" else None
    return {
        "verb": verb,
        "objectRef": ref,
        "user": {"username": "scheduler"},
        "responseStatus": {"code": 201 if verb == "create" else 200},
        "requestObject": obj,
        "stageTimestamp": _at(second),
    }


def _breaches(events: list[dict[str, Any]]) -> list[tuple[str | None, str | None, bool]]:
    found = wait_breaches(mode_changes(events), occupancies(events, MEM), MEM, by=OP, race_s=2.0)
    return [(b.change.old, b.change.new, b.race) for b in found]


def test_a_switch_under_a_bound_gpu_pod_is_a_breach_and_one_right_after_its_binding_a_race() -> None:
    created = _node("create", 0, {c.LABEL_SCHEDULE: "cgpu"})
    bound = _pod("create", 1, "binding")
    assert _breaches([created, bound, _node("patch", 9, {c.LABEL_SCHEDULE: "share"}, OP)]) == [
        ("cgpu", "share", False)
    ]
    assert _breaches([created, bound, _node("patch", 2.5, {c.LABEL_SCHEDULE: "share"}, OP)]) == [
        ("cgpu", "share", True)
    ]


def test_what_is_not_a_breach() -> None:
    created = _node("create", 0, {c.LABEL_SCHEDULE: "cgpu"})
    bound, deleted = _pod("create", 1, "binding"), _pod("delete", 5)
    switch = _node("patch", 9, {c.LABEL_SCHEDULE: "share"}, OP)
    # the pod was gone before the write; bound after it; bound elsewhere
    assert _breaches([created, bound, deleted, switch]) == []
    assert _breaches([created, switch, _pod("create", 10, "binding")]) == []
    assert _breaches([created, _pod("create", 1, "binding", node="n2"), switch]) == []
    # someone else wrote it; the write was refused (409); it changed no mode label
    assert _breaches([created, bound, _node("patch", 9, {c.LABEL_SCHEDULE: "share"}, "admin")]) == []
    assert _breaches([created, bound, _node("patch", 9, {c.LABEL_SCHEDULE: "share"}, OP, code=409)]) == []
    assert _breaches([created, bound, _node("patch", 9, {c.LABEL_CGPU: "true"}, OP)]) == []
    # a pod that holds no GPU memory
    none = {POD: {"cpu": 1}}
    events = [created, bound, switch]
    assert wait_breaches(mode_changes(events), occupancies(events, none), none, by=OP, race_s=2.0) == []


def test_mode_changes_replays_creations_merge_and_json_patches() -> None:
    events = [
        _node("create", 0, {}),
        _node("patch", 1, {c.LABEL_SCHEDULE: "cgpu"}, OP),
        _node("patch", 2, {c.LABEL_SCHEDULE: "cgpu"}, OP),  # the same value: no change
        {
            **_node("patch", 3, {}, OP),
            "requestObject": [
                {"op": "replace", "path": "/metadata/labels/ack.node.gpu.schedule", "value": "share"}
            ],
        },
        _node("patch", 4, {c.LABEL_SCHEDULE: None}, OP),
    ]
    assert [(m.old, m.new) for m in mode_changes(events)] == [
        (None, "cgpu"),
        ("cgpu", "share"),
        ("share", None),
    ]
