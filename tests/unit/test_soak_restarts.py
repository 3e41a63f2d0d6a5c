"""The soak's plugin-restarts check over audit records (``gpushare.devcluster.soakaudit``): each
change of a node's ACK plugin labels by the operator owes one deletion of the node's plugin pods
created before the restart's ``since``; a second one, one of a newer pod, or none at all is a
violation, and pods the soak deleted itself or a node without a plugin pod owe the operator nothing."""

from __future__ import annotations

import json
from typing import Any

from gpushare import constants as c
from gpushare.backends.ack import ACK
from gpushare.devcluster.soakaudit import plugin_restarts
from gpushare.policy.planner import plugin_labels_hash

OP = "gpushare-operator"
NS = c.DEFAULT_PLUGIN_NAMESPACE
CGPU = {c.LABEL_CGPU: "true", c.LABEL_DISABLE_ISOLATION: "false", c.LABEL_SCHEDULE: "cgpu"}


def _at(second: float) -> str:
    return f"2026-12-06T10:00:{second:06.3f}Z"


def _event(
    verb: str, ref: dict[str, Any], second: float, user: str, obj: Any = None, **more: Any
) -> dict[str, Any]:
    return {
        "verb": verb,
        "objectRef": ref,
        "user": {"username": user},
        "responseStatus": {"code": more.pop("code", 201 if verb == "create" else 200)},
        "requestObject": obj,
        "stageTimestamp": _at(second),
        **more,
    }


def _node(
    second: float, labels: dict[str, str], *, node: str = "n1", since: float | None = None
) -> dict[str, Any]:
    """A merge patch of the operator's: the labels, and a Pending restart from ``since``."""
    meta: dict[str, Any] = {"labels": labels}
    if since is not None:
        record = {"hash": "h", "since": _at(since).split(".")[0] + "Z", "state": "Pending", "pool": "p"}
        meta["annotations"] = {c.ANNOTATION_PLUGIN_RESTART: json.dumps(record)}
    return _event("patch", {"resource": "nodes", "name": node}, second, OP, {"metadata": meta})


def _created(name: str, second: int, node: str = "n1") -> list[dict[str, Any]]:
    """A plugin pod created by the DaemonSet controller (its response), bound to ``node``."""
    pod = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": dict(c.DEFAULT_PLUGIN_LABELS),
            "creationTimestamp": f"2026-12-06T10:00:{second:02d}Z",
        }
    }
    ds = "system:serviceaccount:kube-system:daemon-set-controller"
    create = _event("create", {"resource": "pods", "namespace": NS}, second, ds, None, responseObject=pod)
    bind = _event(
        "create",
        {"resource": "pods", "namespace": NS, "name": name, "subresource": "binding"},
        second + 0.1,
        "system:kube-scheduler",
        {"target": {"kind": "Node", "name": node}},
    )
    return [create, bind]


def _deleted(name: str, second: float, user: str = OP) -> dict[str, Any]:
    body = {"preconditions": {"uid": f"uid-{name}"}}
    return _event("delete", {"resource": "pods", "namespace": NS, "name": name}, second, user, body)


def _start() -> list[dict[str, Any]]:
    created = _event(
        "create",
        {"resource": "nodes", "name": "n1"},
        0,
        "admin",
        {"metadata": {"name": "n1", "labels": CGPU}},
    )
    return [created, *_created("p1", 1)]


SWITCH = _node(10.4, {c.LABEL_SCHEDULE: "share"}, since=11)


def _found(events: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    audit = plugin_restarts(events, by=OP)
    counts = {
        "owed": len(audit.changes),
        "operator": audit.by_operator,
        "others": audit.by_others,
        "no_pod": audit.no_pod,
        "carried": audit.carried,
        "excused": audit.excused,
    }
    return [what.split(":")[0] for what, _ in audit.violations], {k: v for k, v in counts.items() if v}


def test_one_deletion_of_the_old_pod_after_the_change_passes() -> None:
    events = [*_start(), SWITCH, _deleted("p1", 11.5), *_created("p2", 12)]
    assert _found(events) == ([], {"owed": 1, "operator": 1})


def test_a_doubled_restart_fails() -> None:
    # the new pod (created after since) deleted too: the plugin restarts twice for one change
    events = [*_start(), SWITCH, _deleted("p1", 11.5), *_created("p2", 12), _deleted("p2", 20)]
    assert _found(events)[0] == ["doubled", "doubled"]  # a pod created after since; a second pod
    # a plugin pod deleted where no change owes a restart
    assert _found([*_start(), _deleted("p1", 5)])[0] == ["doubled"]


def test_a_missed_restart_fails() -> None:
    # the old pod never deleted after the node's last change
    assert _found([*_start(), SWITCH]) == (["missed"], {"owed": 1})
    # the labels changed with no restart recorded in the same patch
    unrecorded = _node(10.4, {c.LABEL_SCHEDULE: "share"})
    assert _found([*_start(), unrecorded, _deleted("p1", 11.5)])[0][0] == "missed"


def test_what_the_operator_legitimately_does_not_delete() -> None:
    # the soak's fault deleted the old pod first; its replacement is newer than since
    by_soak = [*_start(), SWITCH, _deleted("p1", 10.8, user="admin"), *_created("p2", 11)]
    assert _found(by_soak) == ([], {"owed": 1, "others": 1})
    # ...or older than since: then the operator deletes the replacement, once
    early = [*_start(), SWITCH, _deleted("p1", 10.5, user="admin"), *_created("p2", 10), _deleted("p2", 11.2)]
    assert _found(early) == ([], {"owed": 1, "operator": 1})
    # a node running no plugin pod
    bare = _event(
        "create",
        {"resource": "nodes", "name": "n2"},
        0,
        "admin",
        {"metadata": {"name": "n2", "labels": CGPU}},
    )
    assert _found([bare, _node(10.4, {c.LABEL_SCHEDULE: "share"}, node="n2", since=11)]) == (
        [],
        {"owed": 1, "no_pod": 1},
    )
    # switched back before the restart: one deletion serves both changes
    back = _node(10.7, {c.LABEL_SCHEDULE: "cgpu"}, since=11)
    assert _found([*_start(), SWITCH, back, _deleted("p1", 11.5)]) == (
        [],
        {"owed": 2, "operator": 1, "carried": 1},
    )
    # the node's record already names the new values (put back before the plugin saw the change)
    done = {"hash": plugin_labels_hash(CGPU, ACK), "since": _at(1), "state": "Done", "pool": "p"}
    seen = _event(
        "patch",
        {"resource": "nodes", "name": "n1"},
        2,
        OP,
        {"metadata": {"annotations": {c.ANNOTATION_PLUGIN_RESTART: json.dumps(done)}}},
    )
    hand = _event(
        "patch",
        {"resource": "nodes", "name": "n1"},
        3,
        "admin",
        {"metadata": {"labels": {c.LABEL_SCHEDULE: "share"}}},
    )
    put_back = _node(4, {c.LABEL_SCHEDULE: "cgpu"})
    assert _found([*_start(), seen, hand, put_back]) == ([], {"owed": 1, "excused": 1})
    # a refused write (409) changed nothing
    refused = {**SWITCH, "responseStatus": {"code": 409}}
    assert _found([*_start(), refused]) == ([], {})
