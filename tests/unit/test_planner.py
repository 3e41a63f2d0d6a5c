"""The planner's rules, one table row per case (issue 2 "Label mapping", docs/concepts/ack-labels.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.policy import (
    Action,
    NodeView,
    Ownership,
    PodView,
    RestartRecord,
    apply_node_patch,
    desired_labels,
    plan,
    restore_labels,
)
from gpushare.policy.planner import plugin_labels_hash
from gpushare.policy.views import PodView as PV
from gpushare.policy.views import pod_requests, quantity_int

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
LATER = datetime(2026, 11, 29, 13, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"


def pool(name: str, np: str, **spec: Any) -> GPUSharePool:
    return parse_pool(
        {"metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": {NP: np}}, **spec}}
    )


def node(name: str, labels: dict[str, str] | None = None, **kw: Any) -> NodeView:
    return NodeView(name, labels or {}, **kw)


def gpu_pod(node_name: str, name: str = "job", phase: str = "Running", mem: int = 2) -> PodView:
    return PodView(
        "default", name, uid=f"uid-{name}", node_name=node_name, phase=phase, requests={c.RES_GPU_MEM: mem}
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, ("false", "cgpu", "binpack"), id="isolation-default"),
        pytest.param({"memoryIsolation": False}, ("true", "share", "binpack"), id="no-isolation"),
        pytest.param({"computeAllocation": True}, ("false", "core_mem", "binpack"), id="compute"),
        pytest.param({"placement": "spread"}, ("false", "cgpu", "spread"), id="spread"),
        pytest.param(
            {"memoryIsolation": False, "placement": "spread"}, ("true", "share", "spread"), id="share-spread"
        ),
    ],
)
def test_desired_labels(spec: dict[str, Any], expected: tuple[str, str, str]) -> None:
    labels = desired_labels(pool("p", "x", **spec).spec, "p")
    assert labels == {
        c.LABEL_CGPU: "true",
        c.LABEL_DISABLE_ISOLATION: expected[0],
        c.LABEL_SCHEDULE: expected[1],
        c.LABEL_PLACEMENT: expected[2],
        c.LABEL_POOL: "p",
    }
    assert set(labels) == set(c.MANAGED_LABELS) - {c.LABEL_NVIDIA_CONFIG, c.LABEL_MIG_CONFIG}


#: What ACK's restore writes: its labels and gpushare.io/pool.
ACK_LABELS = tuple(k for k in c.MANAGED_LABELS if k not in (c.LABEL_NVIDIA_CONFIG, c.LABEL_MIG_CONFIG))


@pytest.mark.parametrize(
    ("prior", "expected"),
    [
        pytest.param(
            dict.fromkeys(c.MANAGED_LABELS),
            {**dict.fromkeys(ACK_LABELS), c.LABEL_SCHEDULE: "default"},
            id="nothing-before-schedule-default",
        ),
        pytest.param(
            {**dict.fromkeys(c.MANAGED_LABELS), c.LABEL_SCHEDULE: "share", c.LABEL_CGPU: "true"},
            {**dict.fromkeys(ACK_LABELS), c.LABEL_SCHEDULE: "share", c.LABEL_CGPU: "true"},
            id="prior-values-back",
        ),
    ],
)
def test_restore_labels(prior: dict[str, str | None], expected: dict[str, str | None]) -> None:
    assert restore_labels(prior) == expected


def test_first_apply_writes_labels_ownership_and_pending_restart_in_one_patch() -> None:
    n = node("n1", {NP: "a", "team": "ml", c.LABEL_PLACEMENT: "spread"})
    p = plan([pool("gpu", "a")], [n], now=NOW).by_node()["n1"]
    assert p.action is Action.APPLY
    assert p.pool == "gpu"
    assert p.reason == "Adopted"
    assert p.label_patch == {
        c.LABEL_CGPU: "true",
        c.LABEL_DISABLE_ISOLATION: "false",
        c.LABEL_SCHEDULE: "cgpu",
        c.LABEL_PLACEMENT: "binpack",
        c.LABEL_POOL: "gpu",
    }
    owned = json.loads(p.annotation_patch[c.ANNOTATION_OWNED] or "")
    assert owned == {
        "pool": "gpu",
        "prior": {**dict.fromkeys(c.MANAGED_LABELS), c.LABEL_PLACEMENT: "spread"},
    }
    record = RestartRecord.parse(p.annotation_patch[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    assert (record.state, record.pool, record.since) == ("Pending", "gpu", "2026-11-29T12:00:01Z")
    assert p.restart_plugin and p.plugin_restart_pending
    assert p.mode_switch == ("default", "cgpu")
    patch = p.node_patch()
    assert set(patch) == {"metadata"}
    assert set(patch["metadata"]) == {"labels", "annotations"}


def test_patch_is_minimal() -> None:
    n = node("n1", {NP: "a", c.LABEL_CGPU: "true", c.LABEL_SCHEDULE: "cgpu", c.LABEL_PLACEMENT: "binpack"})
    p = plan([pool("gpu", "a")], [n], now=NOW).by_node()["n1"]
    assert p.label_patch == {c.LABEL_DISABLE_ISOLATION: "false", c.LABEL_POOL: "gpu"}
    assert p.mode_switch is None
    assert p.restart_plugin


def test_adopting_a_node_already_labelled_needs_no_restart() -> None:
    labels = {NP: "a", c.LABEL_CGPU: "true", c.LABEL_DISABLE_ISOLATION: "false", c.LABEL_SCHEDULE: "cgpu"}
    labels[c.LABEL_PLACEMENT] = "binpack"
    p = plan([pool("gpu", "a")], [node("n1", labels)], now=NOW).by_node()["n1"]
    assert p.label_patch == {c.LABEL_POOL: "gpu"}
    assert not p.restart_plugin
    record = RestartRecord.parse(p.annotation_patch[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    assert (record.state, record.result) == ("Done", "Adopted")
    assert not p.plugin_restart_pending


def _applied(pools: list[GPUSharePool], nodes: list[NodeView], **kw: Any) -> list[NodeView]:
    cp = plan(pools, nodes, now=NOW, **kw).by_node()
    return [apply_node_patch(n, cp[n.name]) for n in nodes]


def test_second_plan_is_noop_with_zero_patches() -> None:
    pools = [pool("gpu", "a"), pool("share", "b", memoryIsolation=False)]
    nodes = _applied(pools, [node("n1", {NP: "a"}), node("n2", {NP: "b"}), node("n3", {NP: "c"})])
    cp = plan(pools, nodes, now=LATER)
    assert [p.action for p in cp.nodes] == [Action.NOOP] * 3
    assert cp.changes() == []
    assert all(p.node_patch() == {} for p in cp.nodes)
    # The restart owed by the first patch is still reported (the operator resumes it).
    assert [p.plugin_restart_pending for p in cp.nodes] == [True, True, False]


def test_only_pool_label_change_needs_no_restart() -> None:
    nodes = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    # Rename: same spec, other pool name → only gpushare.io/pool and the ownership move.
    p = plan([pool("gpu2", "a")], nodes, now=LATER).by_node()["n1"]
    assert p.action is Action.APPLY
    assert p.reason == "MovedPool"
    assert p.label_patch == {c.LABEL_POOL: "gpu2"}
    assert not p.restart_plugin
    assert p.mode_switch is None


def test_toggle_isolation_relabels_and_owes_a_new_restart() -> None:
    nodes = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    p = plan([pool("gpu", "a", memoryIsolation=False)], nodes, now=LATER).by_node()["n1"]
    assert p.label_patch == {c.LABEL_DISABLE_ISOLATION: "true", c.LABEL_SCHEDULE: "share"}
    assert p.mode_switch == ("cgpu", "share")
    assert p.restart_plugin
    assert c.ANNOTATION_OWNED not in p.annotation_patch  # ownership (and prior) unchanged
    record = RestartRecord.parse(p.annotation_patch[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    assert (record.state, record.since) == ("Pending", "2026-11-29T13:00:01Z")
    assert not p.drift


def test_compute_allocation_switches_to_core_mem() -> None:
    nodes = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    p = plan([pool("gpu", "a", computeAllocation=True)], nodes, now=LATER).by_node()["n1"]
    assert p.label_patch == {c.LABEL_SCHEDULE: "core_mem"}
    assert p.mode_switch == ("cgpu", "core_mem")


def test_drift_is_put_back_and_flagged() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    edited = NodeView(n.name, {**n.labels, c.LABEL_DISABLE_ISOLATION: "true"}, n.annotations)
    p = plan([pool("gpu", "a")], [edited], now=LATER).by_node()["n1"]
    assert p.label_patch == {c.LABEL_DISABLE_ISOLATION: "false"}
    assert p.drift
    assert p.reason == "DriftCorrected"
    # The plugin was told about exactly these values (record hash unchanged): no second restart.
    assert not p.restart_plugin
    assert c.ANNOTATION_PLUGIN_RESTART not in p.annotation_patch


def test_drift_of_pool_label_only() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    edited = NodeView(n.name, {k: v for k, v in n.labels.items() if k != c.LABEL_POOL}, n.annotations)
    p = plan([pool("gpu", "a")], [edited], now=LATER).by_node()["n1"]
    assert p.label_patch == {c.LABEL_POOL: "gpu"}
    assert p.drift and not p.restart_plugin


@pytest.mark.parametrize(
    ("start", "expected_after_restore"),
    [
        pytest.param({NP: "a", "x": "1"}, {NP: "a", "x": "1", c.LABEL_SCHEDULE: "default"}, id="bare-node"),
        pytest.param(
            {NP: "a", c.LABEL_SCHEDULE: "share", c.LABEL_PLACEMENT: "spread", c.LABEL_CGPU: "false"},
            {NP: "a", c.LABEL_SCHEDULE: "share", c.LABEL_PLACEMENT: "spread", c.LABEL_CGPU: "false"},
            id="prior-values",
        ),
        pytest.param(
            {NP: "a", c.LABEL_SCHEDULE: "default"},
            {NP: "a", c.LABEL_SCHEDULE: "default"},
            id="explicit-default",
        ),
    ],
)
def test_pool_deletion_restores(start: dict[str, str], expected_after_restore: dict[str, str]) -> None:
    pools = [pool("gpu", "a")]
    nodes = _applied(pools, [node("n1", start)])
    cp = plan(pools, nodes, now=LATER, deleting={"gpu"})
    p = cp.by_node()["n1"]
    assert p.action is Action.RESTORE
    assert p.reason == "PoolDeleted"
    assert p.pool == "gpu"
    assert p.annotation_patch[c.ANNOTATION_OWNED] is None
    (restored,) = [apply_node_patch(nodes[0], p)]
    assert dict(restored.labels) == expected_after_restore
    assert c.ANNOTATION_OWNED not in restored.annotations
    # The plugin must see the restored labels too, and the deleting pool owes that restart.
    assert p.restart_plugin
    assert p.plugin_restart is not None and p.plugin_restart.pool == "gpu"
    # After the restore the node is nobody's: planning again changes nothing.
    again = plan(pools, [restored], now=LATER, deleting={"gpu"}).by_node()["n1"]
    assert again.action is Action.NOOP and not again.changed


def test_pool_deletion_retain_keeps_ack_labels() -> None:
    pools = [pool("gpu", "a", cleanup="Retain")]
    nodes = _applied(pools, [node("n1", {NP: "a"})])
    p = plan(pools, nodes, now=LATER, deleting={"gpu"}).by_node()["n1"]
    assert p.action is Action.RETAIN
    assert p.label_patch == {c.LABEL_POOL: None}
    assert p.annotation_patch == {c.ANNOTATION_OWNED: None}
    assert not p.restart_plugin
    after = apply_node_patch(nodes[0], p)
    assert after.labels[c.LABEL_SCHEDULE] == "cgpu"
    assert c.LABEL_POOL not in after.labels


@pytest.mark.parametrize(
    ("pools_after", "new_labels", "reason"),
    [
        pytest.param([pool("gpu", "zzz")], {NP: "a"}, "LeftSelector", id="selector-changed"),
        pytest.param([pool("gpu", "a")], {NP: "b"}, "LeftSelector", id="node-relabelled"),
        pytest.param([], {NP: "a"}, "PoolGone", id="pool-gone"),
    ],
)
def test_node_leaving_its_pool_is_restored(
    pools_after: list[GPUSharePool], new_labels: dict[str, str], reason: str
) -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    moved = NodeView(n.name, {**n.labels, **new_labels}, n.annotations)
    p = plan(pools_after, [moved], now=LATER).by_node()["n1"]
    assert p.action is Action.RESTORE
    assert p.reason == reason
    assert p.label_patch == {
        c.LABEL_CGPU: None,
        c.LABEL_DISABLE_ISOLATION: None,
        c.LABEL_SCHEDULE: "default",
        c.LABEL_PLACEMENT: None,
        c.LABEL_POOL: None,
    }


def test_moving_to_another_pool_keeps_the_original_prior() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a", c.LABEL_PLACEMENT: "spread"})])
    moved = NodeView(n.name, {**n.labels, NP: "b"}, n.annotations)
    pools = [pool("gpu", "a"), pool("share", "b", memoryIsolation=False)]
    p = plan(pools, [moved], now=LATER).by_node()["n1"]
    assert p.action is Action.APPLY
    assert p.reason == "MovedPool"
    assert p.label_patch == {
        c.LABEL_DISABLE_ISOLATION: "true",
        c.LABEL_SCHEDULE: "share",
        c.LABEL_POOL: "share",
    }
    owned = Ownership.parse(p.annotation_patch[c.ANNOTATION_OWNED])
    assert owned is not None
    assert owned.pool == "share"
    assert owned.prior[c.LABEL_PLACEMENT] == "spread"
    assert owned.prior[c.LABEL_SCHEDULE] is None


def test_skip_label_leaves_node_alone() -> None:
    n = node("n1", {NP: "a", c.LABEL_SKIP: "true"})
    p = plan([pool("gpu", "a")], [n], now=NOW).by_node()["n1"]
    assert p.action is Action.SKIP
    assert p.pool == "gpu"
    assert not p.changed and p.node_patch() == {}


def test_skip_label_on_owned_node_also_blocks_restore() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    skipped = NodeView(n.name, {**n.labels, c.LABEL_SKIP: "true"}, n.annotations)
    p = plan([], [skipped], now=LATER).by_node()["n1"]
    assert p.action is Action.SKIP
    assert not p.changed


def test_conflict_changes_nothing_and_names_both_pools() -> None:
    n = node("n1", {NP: "a", "zone": "z1"})
    pools = [
        pool("p1", "a"),
        parse_pool({"metadata": {"name": "p2"}, "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}}),
    ]
    cp = plan(pools, [n], now=NOW)
    p = cp.by_node()["n1"]
    assert p.action is Action.CONFLICT
    assert p.conflict_pools == ("p1", "p2")
    assert not p.changed
    assert cp.for_pool("p1") == [p] and cp.for_pool("p2") == [p]


def test_conflict_on_owned_node_keeps_its_labels() -> None:
    (n,) = _applied([pool("p1", "a")], [node("n1", {NP: "a", "zone": "z1"})])
    other = parse_pool(
        {"metadata": {"name": "p2"}, "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}}}
    )
    p = plan([pool("p1", "a"), other], [n], now=LATER).by_node()["n1"]
    assert p.action is Action.CONFLICT
    assert not p.changed


def test_deleting_pool_does_not_conflict_and_node_moves() -> None:
    (n,) = _applied([pool("p1", "a")], [node("n1", {NP: "a", "zone": "z1"})])
    other = parse_pool(
        {
            "metadata": {"name": "p2"},
            "spec": {"nodeSelector": {"matchLabels": {"zone": "z1"}}, "placement": "spread"},
        }
    )
    p = plan([pool("p1", "a"), other], [n], now=LATER, deleting={"p1"}).by_node()["n1"]
    assert p.action is Action.APPLY
    assert p.label_patch == {c.LABEL_PLACEMENT: "spread", c.LABEL_POOL: "p2"}


def test_unselected_foreign_node_untouched() -> None:
    n = node("n1", {NP: "zzz", c.LABEL_SCHEDULE: "cgpu", c.LABEL_CGPU: "true"})
    p = plan([pool("gpu", "a")], [n], now=NOW).by_node()["n1"]
    assert (p.action, p.pool, p.changed) == (Action.NOOP, None, False)


# --- mode switch guard -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "action", "cordon", "evict"),
    [
        pytest.param("Wait", Action.HOLD, False, False, id="wait"),
        pytest.param("Cordon", Action.HOLD, True, False, id="cordon"),
        pytest.param("Evict", Action.HOLD, True, True, id="evict"),
        pytest.param("Force", Action.APPLY, False, False, id="force"),
    ],
)
def test_mode_switch_blocked_by_gpu_pod(policy: str, action: Action, cordon: bool, evict: bool) -> None:
    pools = [pool("gpu", "a", rollout={"modeSwitch": policy})]
    nodes = _applied(pools, [node("n1", {NP: "a"})])
    switched = [pool("gpu", "a", memoryIsolation=False, rollout={"modeSwitch": policy})]
    pods = [
        gpu_pod("n1"),
        gpu_pod("n1", "done", phase="Succeeded"),
        PodView("kube-system", "dp", node_name="n1"),
    ]
    p = plan(switched, nodes, pods, now=LATER).by_node()["n1"]
    assert p.action is action
    assert p.mode_switch == ("cgpu", "share")
    assert [x.ref for x in p.blocking_pods] == ["default/job"]
    assert p.hold == policy
    assert p.cordon is cordon
    assert [x.ref for x in p.evict_pods] == (["default/job"] if evict else [])
    if action is Action.HOLD:
        assert p.label_patch == {}
        assert p.reason == "ModeSwitchBlocked"
        assert (c.ANNOTATION_CORDONED_BY in p.annotation_patch) is cordon
        assert "default/job" in p.message
    else:
        assert p.force and p.label_patch and p.restart_plugin
        assert p.reason == "ModeSwitchForced"


def test_no_mode_switch_no_hold() -> None:
    """Placement changes do not switch the GPU mode: running pods do not block them."""
    pools = [pool("gpu", "a")]
    nodes = _applied(pools, [node("n1", {NP: "a"})])
    p = plan([pool("gpu", "a", placement="spread")], nodes, [gpu_pod("n1")], now=LATER).by_node()["n1"]
    assert p.action is Action.APPLY
    assert p.mode_switch is None and p.blocking_pods == ()


def test_admin_cordon_is_not_ours() -> None:
    pools = [pool("gpu", "a", rollout={"modeSwitch": "Cordon"})]
    (n,) = _applied(pools, [node("n1", {NP: "a"})])
    admin = NodeView(n.name, n.labels, n.annotations, unschedulable=True)
    switched = [pool("gpu", "a", memoryIsolation=False, rollout={"modeSwitch": "Cordon"})]
    held = plan(switched, [admin], [gpu_pod("n1")], now=LATER).by_node()["n1"]
    assert held.action is Action.HOLD and not held.cordon and held.annotation_patch == {}
    done = plan(switched, [admin], [], now=LATER).by_node()["n1"]
    assert done.action is Action.APPLY
    assert not done.uncordon and "spec" not in done.node_patch()


def test_cordon_cycle_uncordons_after_restart_done() -> None:
    base = [pool("gpu", "a", rollout={"modeSwitch": "Cordon"})]
    (n,) = _applied(base, [node("n1", {NP: "a"})])
    switched = [pool("gpu", "a", memoryIsolation=False, rollout={"modeSwitch": "Cordon"})]
    p1 = plan(switched, [n], [gpu_pod("n1")], now=LATER).by_node()["n1"]
    assert p1.node_patch()["spec"] == {"unschedulable": True}
    n = apply_node_patch(n, p1)
    assert n.unschedulable and n.annotations[c.ANNOTATION_CORDONED_BY] == "gpu"
    # Still blocked: nothing more to write.
    assert not plan(switched, [n], [gpu_pod("n1")], now=LATER).by_node()["n1"].changed
    # The pod finished: labels change, restart owed, the cordon stays until the plugin is back.
    p2 = plan(switched, [n], [gpu_pod("n1", phase="Succeeded")], now=LATER).by_node()["n1"]
    assert p2.action is Action.APPLY and p2.restart_plugin and not p2.uncordon
    n = apply_node_patch(n, p2)
    assert not plan(switched, [n], [], now=LATER).by_node()["n1"].changed
    # The operator records the restart as done: now the cordon is given back.
    record = RestartRecord.parse(n.annotations[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    done = RestartRecord(record.hash, record.since, "Done", record.pool)
    n = NodeView(
        n.name, n.labels, {**n.annotations, c.ANNOTATION_PLUGIN_RESTART: done.dump()}, unschedulable=True
    )
    p3 = plan(switched, [n], [], now=LATER).by_node()["n1"]
    assert p3.uncordon
    assert p3.node_patch() == {
        "metadata": {"annotations": {c.ANNOTATION_CORDONED_BY: None}},
        "spec": {"unschedulable": None},
    }
    n = apply_node_patch(n, p3)
    assert not n.unschedulable
    assert not plan(switched, [n], [], now=LATER).by_node()["n1"].changed


def test_restore_is_guarded_too() -> None:
    pools = [pool("gpu", "a")]
    nodes = _applied(pools, [node("n1", {NP: "a"})])
    p = plan(pools, nodes, [gpu_pod("n1")], now=LATER, deleting={"gpu"}).by_node()["n1"]
    assert p.action is Action.HOLD
    assert p.mode_switch == ("cgpu", "default")
    assert not p.changed


# --- plugin restart records -------------------------------------------------------------------


def test_restart_never_records_skipped_without_restart() -> None:
    p = plan(
        [pool("gpu", "a", devicePlugin={"restart": "Never"})], [node("n1", {NP: "a"})], now=NOW
    ).by_node()["n1"]
    assert p.label_patch and not p.restart_plugin and not p.plugin_restart_pending
    assert p.plugin_restart is not None and p.plugin_restart.state == "Skipped"


def test_pending_restart_for_same_values_is_not_renewed() -> None:
    pools = [pool("gpu", "a")]
    (n,) = _applied(pools, [node("n1", {NP: "a"})])
    edited = NodeView(n.name, {**n.labels, c.LABEL_SCHEDULE: "share"}, n.annotations)
    p = plan(pools, [edited], now=LATER).by_node()["n1"]
    assert p.label_patch == {c.LABEL_SCHEDULE: "cgpu"}
    assert c.ANNOTATION_PLUGIN_RESTART not in p.annotation_patch
    assert p.plugin_restart_pending  # the restart owed since NOW still stands
    assert p.plugin_restart is not None and p.plugin_restart.since == "2026-11-29T12:00:01Z"


def test_new_change_during_pending_restart_renews_since() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    p = plan([pool("gpu", "a", placement="spread")], [n], now=LATER).by_node()["n1"]
    assert p.restart_plugin
    assert p.plugin_restart is not None and p.plugin_restart.since == "2026-11-29T13:00:01Z"


def test_restart_hash_is_of_the_four_plugin_labels() -> None:
    a = {c.LABEL_CGPU: "true", c.LABEL_SCHEDULE: "cgpu", c.LABEL_POOL: "x", "other": "1"}
    b = {**a, c.LABEL_POOL: "y", "other": "2"}
    assert plugin_labels_hash(a) == plugin_labels_hash(b)
    assert plugin_labels_hash(a) != plugin_labels_hash({**a, c.LABEL_SCHEDULE: "share"})


def test_unreadable_ownership_still_counts_as_ours() -> None:
    n = node(
        "n1",
        {NP: "zzz", c.LABEL_SCHEDULE: "cgpu", c.LABEL_CGPU: "true"},
        annotations={c.ANNOTATION_OWNED: "{oops"},
    )
    p = plan([pool("gpu", "a")], [n], now=NOW).by_node()["n1"]
    assert p.action is Action.RESTORE
    assert p.label_patch == {c.LABEL_SCHEDULE: "default", c.LABEL_CGPU: None}


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(None, id="absent"),
        pytest.param("not json", id="garbage"),
        pytest.param('{"state": "Weird", "hash": "x"}', id="bad-state"),
        pytest.param('{"state": "Done"}', id="no-hash"),
    ],
)
def test_restart_record_parse_rejects(raw: str | None) -> None:
    assert RestartRecord.parse(raw) is None


def test_invalid_pool_freezes_its_nodes() -> None:
    (n,) = _applied([pool("gpu", "a")], [node("n1", {NP: "a"})])
    cp = plan([], [n], now=LATER, invalid={"gpu": "spec.x is wrong"})
    p = cp.by_node()["n1"]
    assert (p.action, p.reason, p.changed) == (Action.NOOP, "PoolInvalid", False)
    assert cp.invalid_pools == {"gpu": "spec.x is wrong"}


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({"matchLabels": {c.LABEL_CGPU: "true"}}, id="matchLabels"),
        pytest.param(
            {"matchExpressions": [{"key": c.LABEL_SCHEDULE, "operator": "Exists"}]}, id="expression"
        ),
        pytest.param({"matchLabels": {c.LABEL_POOL: "x"}}, id="pool-label"),
    ],
)
def test_selector_on_managed_labels_is_rejected(selector: dict[str, Any]) -> None:
    with pytest.raises(PoolValidationError, match="must not use labels gpushare writes itself"):
        parse_pool({"metadata": {"name": "p"}, "spec": {"nodeSelector": selector}})


def test_planner_guard_ignores_selector_on_managed_labels() -> None:
    bad = GPUSharePool.model_construct(
        metadata=pool("bad", "a").metadata,
        spec=pool("bad", "a").spec.model_copy(
            update={
                "node_selector": pool("x", "a").spec.node_selector.model_copy(
                    update={"match_labels": {"cgpu": "true"}}
                )
            }
        ),
    )
    cp = plan([bad], [node("n1", {c.LABEL_CGPU: "true"})], now=NOW)
    assert "bad" in cp.invalid_pools
    assert cp.by_node()["n1"].action is Action.NOOP


def test_a_pool_stored_before_the_sharing_label_rule_is_reported_and_its_nodes_left_alone() -> None:
    """An NVIDIA pool selecting nvidia.com/gpu.product, stored before the CRD refused it, that
    labelled its node: GFD made the product -SHARED, so acting on the selector would restore
    the node (and flap). The planner reports the pool invalid and leaves its node as it is."""
    good = pool("ts", "a", nvidia={"strategy": "TimeSlicing", "replicas": 4})
    (n,) = _applied([good], [node("n1", {NP: "a"})])
    shared = {**n.labels, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"}
    stored = GPUSharePool.model_construct(
        metadata=good.metadata,
        spec=good.spec.model_copy(
            update={
                "node_selector": good.spec.node_selector.model_copy(
                    update={"match_labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}
                )
            }
        ),
    )
    cp = plan([stored], [NodeView("n1", shared, annotations=dict(n.annotations))], now=LATER)
    assert "nvidia.com/gpu.product" in cp.invalid_pools["ts"]
    p = cp.by_node()["n1"]
    assert (p.action, p.reason, p.label_patch) == (Action.NOOP, "PoolInvalid", {})


# --- views ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("4", 4, id="str"),
        pytest.param(4, 4, id="int"),
        pytest.param("2k", 2000, id="k"),
        pytest.param("1Ki", 1024, id="Ki"),
        pytest.param("abc", 0, id="garbage"),
        pytest.param(None, 0, id="none"),
        pytest.param(True, 0, id="bool"),
    ],
)
def test_quantity_int(value: Any, expected: int) -> None:
    assert quantity_int(value) == expected


def test_pod_requests_with_init_containers() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {c.RES_GPU_MEM: "2", c.RES_GPU_CORE: "30"}}},
            {"resources": {"requests": {c.RES_GPU_MEM: "3"}, "limits": {c.RES_GPU_MEM: "3"}}},
        ],
        "initContainers": [
            {"resources": {"limits": {c.RES_GPU_MEM: "8"}}},
            {"restartPolicy": "Always", "resources": {"limits": {c.RES_GPU_CORE: "5"}}},
        ],
    }
    assert pod_requests(spec) == {c.RES_GPU_MEM: 8, c.RES_GPU_CORE: 35}


def test_a_regular_init_container_runs_beside_the_sidecars_declared_before_it() -> None:
    """Kubernetes' PodRequests (component-helpers/resource/helpers.go; KEP-753): while the i-th
    init container runs, the pod holds it plus the restartable init containers before it."""
    spec = {
        "containers": [{"resources": {"limits": {c.RES_GPU_MEM: "1"}}}],
        "initContainers": [
            {"restartPolicy": "Always", "resources": {"limits": {c.RES_GPU_MEM: "2"}}},
            {"resources": {"limits": {c.RES_GPU_MEM: "7"}}},
            {"restartPolicy": "Always", "resources": {"limits": {c.RES_GPU_MEM: "4"}}},
        ],
    }
    # running: 1 + 2 + 4 = 7; the init phase: 7 + the sidecar before it (2) = 9
    assert pod_requests(spec) == {c.RES_GPU_MEM: 9}


def test_views_from_objects() -> None:
    n = NodeView.from_obj(
        {
            "metadata": {"name": "n1", "labels": {"a": "b"}, "annotations": {"x": "y"}},
            "spec": {"unschedulable": True},
            "status": {
                "allocatable": {c.RES_GPU_MEM: "30"},
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        }
    )
    assert (n.name, dict(n.labels), n.unschedulable, n.allocatable_int(c.RES_GPU_MEM), n.ready) == (
        "n1",
        {"a": "b"},
        True,
        30,
        False,
    )
    pod = PV.from_obj(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "uid": "u",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": {c.RES_GPU_MEM: 2}}}]},
            "status": {"phase": "Succeeded"},
        }
    )
    assert (pod.ref, pod.uid, pod.node_name, pod.requests[c.RES_GPU_MEM], pod.terminated, pod.deletion) == (
        "ns/p",
        "u",
        "n1",
        2,
        True,
        True,
    )


def test_switching_restart_never_to_rolling_owes_the_skipped_restarts() -> None:
    never = [pool("gpu", "a", devicePlugin={"restart": "Never"})]
    nodes = _applied(never, [node("n1", {NP: "a"})])
    assert plan(never, nodes, now=LATER).by_node()["n1"].action is Action.NOOP, "Never: nothing more to do"
    rolling = [pool("gpu", "a")]
    p = plan(rolling, nodes, now=LATER).by_node()["n1"]
    assert p.restart_plugin and p.plugin_restart_pending and not p.label_patch
    assert (p.action, p.reason) == (Action.APPLY, "PluginRestartOwed")
    assert p.plugin_restart is not None and p.plugin_restart.pool == "gpu"
    # Once recorded Pending, planning again changes nothing (no second restart).
    after = [apply_node_patch(nodes[0], p)]
    again = plan(rolling, after, now=LATER).by_node()["n1"]
    assert not again.changed and again.plugin_restart_pending
