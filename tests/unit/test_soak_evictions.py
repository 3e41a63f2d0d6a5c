"""The soak's evictions check over audit records (``gpushare.devcluster.soakaudit.evictions``): no
pod evicted except under Evict, within its PDB: only the operator evicts, only GPU pods on the
nodes of an Evict pool, only through pods/eviction (the apiserver holds each to the pod's
PodDisruptionBudget: its 429s are counted, not violations)."""

from __future__ import annotations

import json
from typing import Any

from gpushare import constants as c
from gpushare.devcluster.soakaudit import evictions

OP = "gpushare-operator"
GPU = {c.RES_GPU_MEM: "1"}


def _at(second: float) -> str:
    return f"2026-12-06T10:00:{second:06.3f}Z"


def _event(
    verb: str, ref: dict[str, Any], second: float, user: str, obj: Any = None, code: int = 200
) -> dict[str, Any]:
    return {
        "verb": verb,
        "objectRef": ref,
        "user": {"username": user},
        "responseStatus": {"code": code},
        "requestObject": obj,
        "stageTimestamp": _at(second),
    }


def _node(
    name: str, second: float, pool: str | None, owner: str | None = None, verb: str = "patch"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {c.LABEL_POOL: pool}}
    if owner is not None or verb == "patch":
        meta["annotations"] = {
            c.ANNOTATION_OWNED: json.dumps({"pool": owner, "prior": {}}) if owner else None
        }
    return _event(verb, {"resource": "nodes", "name": name}, second, OP, {"metadata": meta})


def _pod(name: str, node: str, second: float, limits: dict[str, str] = GPU) -> list[dict[str, Any]]:
    """A pod of the soak's namespace created (its response: a Job's pod has a generated name) and bound."""
    body = {
        "metadata": {"name": name, "namespace": "soak"},
        "spec": {"containers": [{"resources": {"limits": limits}}]},
    }
    create = {
        **_event("create", {"resource": "pods", "namespace": "soak"}, second, "job-controller", code=201),
        "responseObject": body,
    }
    bind = _event(
        "create",
        {"resource": "pods", "namespace": "soak", "name": name, "subresource": "binding"},
        second + 0.1,
        "system:kube-scheduler",
        {"target": {"name": node}},
        code=201,
    )
    return [create, bind]


def _evict(name: str, second: float, user: str = OP, code: int = 201) -> dict[str, Any]:
    ref = {"resource": "pods", "namespace": "soak", "name": name, "subresource": "eviction"}
    return _event("create", ref, second, user, {"kind": "Eviction"}, code=code)


START = [
    _node("e1", 0, "soak-e", "soak-e"),
    _node("a1", 0, "soak-a", "soak-a"),
    *_pod("job-x", "e1", 1),
    *_pod("w", "a1", 1),
]


def _found(events: list[dict[str, Any]]) -> tuple[list[str], tuple[int, int, int]]:
    got = evictions(events, by=OP, evict_pools={"soak-e"}, namespaces={"soak"})
    return [what for what, _ in got.violations], (got.evicted, got.refused, got.deleted)


def test_evictions_under_evict_within_the_pdb_pass() -> None:
    # granted, then refused by the PDB (429), then granted again: no violation
    assert _found([*START, _evict("job-x", 5), _evict("job-x", 6, code=429), _evict("job-x", 7)]) == (
        [],
        (2, 1, 0),
    )
    # a node of the Evict pool being restored: its label gone, its ownership annotation still the pool's
    leaving = _node("e1", 4, None, "soak-e")
    assert _found([*START, leaving, _evict("job-x", 5)]) == ([], (1, 0, 0))


def test_evictions_outside_evict_fail() -> None:
    # a pod of a Wait pool's node
    wait, _ = _found([*START, _evict("w", 5)])
    assert wait == [f"{OP} evicted pod soak/w on node a1 of pool soak-a: not a pool with modeSwitch Evict"]
    # the node left the Evict pool (restored) before the eviction
    gone, _ = _found([*START, _node("e1", 4, None), _evict("job-x", 5)])
    assert gone == [f"{OP} evicted pod soak/job-x on node e1 of pool None: not a pool with modeSwitch Evict"]
    # someone else evicts; a pod that asks for no GPU; a pod bound nowhere
    other, _ = _found([*START, _evict("job-x", 5, user="admin")])
    assert other == [f"admin evicted pod soak/job-x on node e1 of pool soak-e: only {OP} evicts"]
    cpu, _ = _found([*START, *_pod("cpu", "e1", 2, {"cpu": "1"}), _evict("cpu", 5)])
    assert cpu == [
        f"{OP} evicted pod soak/cpu on node e1 of pool soak-e, which asks for no GPU: it held no switch"
    ]
    nowhere, _ = _found([*START, _evict("pending", 5)])
    assert nowhere == [f"{OP} evicted pod soak/pending bound to no node: not a pool with modeSwitch Evict"]


def test_a_workload_pod_deleted_by_the_operator_bypasses_its_pdb() -> None:
    deleted = _event("delete", {"resource": "pods", "namespace": "soak", "name": "job-x"}, 5, OP)
    found, counts = _found([*START, deleted])
    assert counts == (0, 0, 1)
    assert found == [f"{OP} deleted pod soak/job-x itself, not through pods/eviction: its PDB was not asked"]
    # the operator's plugin pod deletions (kube-system) are restarts, not evictions
    plugin = _event("delete", {"resource": "pods", "namespace": "kube-system", "name": "ds-1"}, 5, OP)
    assert _found([*START, plugin]) == ([], (0, 0, 0))


def test_a_violation_names_the_budgets_last_writes() -> None:
    ref = {"resource": "poddisruptionbudgets", "namespace": "soak", "name": "w", "subresource": "status"}
    status = _event(
        "update",
        ref,
        4,
        "system:serviceaccount:kube-system:disruption-controller",
        {"status": {"disruptionsAllowed": 0}},
    )
    got = evictions([*START, status, _evict("w", 5)], by=OP, evict_pools={"soak-e"}, namespaces={"soak"})
    [(_, evidence)] = got.violations
    assert evidence[-1].endswith("update poddisruptionbudgets/status soak/w -> 200 disruptionsAllowed=0")
