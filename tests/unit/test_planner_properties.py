"""Property tests of the planner over generated pools, nodes and pods (issue 2)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.policy import Action, NodeView, PodView, RestartRecord, apply_node_patch, plan, planner
from gpushare.policy.planner import PlanMemo

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"
GROUPS = ("a", "b", "c", "d")

managed_values = {
    c.LABEL_CGPU: st.sampled_from(["true", "false"]),
    c.LABEL_DISABLE_ISOLATION: st.sampled_from(["true", "false"]),
    c.LABEL_SCHEDULE: st.sampled_from(["default", "cgpu", "share", "core_mem", "topology"]),
    c.LABEL_PLACEMENT: st.sampled_from(["binpack", "spread"]),
    c.LABEL_POOL: st.sampled_from(["old", "p0"]),
}


@st.composite
def node_labels(draw: st.DrawFn) -> dict[str, str]:
    labels: dict[str, str] = {}
    if draw(st.booleans()):
        labels[NP] = draw(st.sampled_from(GROUPS))
    if draw(st.booleans()):
        labels["zone"] = draw(st.sampled_from(["z1", "z2"]))
    for key, values in managed_values.items():
        if draw(st.booleans()):
            labels[key] = draw(values)
    labels.update(
        draw(
            st.dictionaries(
                st.sampled_from(["team", "foreign/x", "kubernetes.io/os"]), st.text("ab", max_size=3)
            )
        )
    )
    if draw(st.integers(0, 9)) == 0:
        labels[c.LABEL_SKIP] = "true"
    return labels


@st.composite
def pool_objs(draw: st.DrawFn, index: int) -> GPUSharePool:
    if draw(st.integers(0, 4)) == 0:
        selector: dict[str, Any] = {"matchLabels": {"zone": draw(st.sampled_from(["z1", "z2"]))}}
    else:
        selector = {"matchLabels": {NP: draw(st.sampled_from(GROUPS))}}
    isolation = draw(st.booleans())
    return parse_pool(
        {
            "metadata": {"name": f"p{index}"},
            "spec": {
                "nodeSelector": selector,
                "memoryIsolation": isolation,
                "computeAllocation": isolation and draw(st.booleans()),
                "placement": draw(st.sampled_from(["binpack", "spread"])),
                "cleanup": draw(st.sampled_from(["Restore", "Retain"])),
                "rollout": {"modeSwitch": draw(st.sampled_from(["Wait", "Cordon", "Evict", "Force"]))},
                "devicePlugin": {"restart": draw(st.sampled_from(["Rolling", "Never"]))},
            },
        }
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[GPUSharePool], list[NodeView], list[PodView]]:
    n_pools = draw(st.integers(0, 3))
    pools = [draw(pool_objs(i)) for i in range(n_pools)]
    nodes = [
        NodeView(f"n{i}", draw(node_labels()), unschedulable=draw(st.booleans()))
        for i in range(draw(st.integers(1, 6)))
    ]
    pods = [
        PodView(
            "default",
            f"pod{i}",
            node_name=draw(st.sampled_from([n.name for n in nodes])),
            phase=draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed"])),
            requests={c.RES_GPU_MEM: draw(st.sampled_from([0, 2]))},
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    return pools, nodes, pods


def _apply_all(
    pools: list[GPUSharePool], nodes: list[NodeView], pods: list[PodView], **kw: Any
) -> list[NodeView]:
    cp = plan(pools, nodes, pods, now=NOW, **kw).by_node()
    return [apply_node_patch(n, cp[n.name]) for n in nodes]


def _finish_restarts(nodes: list[NodeView]) -> list[NodeView]:
    """What the operator does after the plugin came back: mark restarts Done."""
    out = []
    for n in nodes:
        record = RestartRecord.parse(n.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
        if record is not None and record.pending:
            done = RestartRecord(record.hash, record.since, "Done", record.pool)
            n = NodeView(
                n.name, n.labels, {**n.annotations, c.ANNOTATION_PLUGIN_RESTART: done.dump()}, n.unschedulable
            )
        out.append(n)
    return out


def _foreign(labels: Any) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in c.MANAGED_LABELS}


common = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(clusters())
def test_apply_then_plan_again_changes_nothing(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]],
) -> None:
    pools, nodes, pods = cluster
    after = _apply_all(pools, nodes, pods)
    again = plan(pools, after, pods, now=NOW + timedelta(minutes=5))
    assert again.changes() == [], [(p.node, p.action, p.node_patch()) for p in again.changes()]


@common
@given(clusters())
def test_convergence_after_restarts_and_pods_finish(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]],
) -> None:
    pools, nodes, _ = cluster
    state = nodes
    for _ in range(4):  # apply, (pods end) apply, finish restarts, uncordon
        state = _finish_restarts(_apply_all(pools, state, []))
    final = plan(pools, state, [], now=NOW)
    assert final.changes() == []
    for p in final.nodes:
        assert p.action in (Action.NOOP, Action.SKIP, Action.CONFLICT)


@common
@given(clusters())
def test_foreign_labels_untouched(cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]]) -> None:
    pools, nodes, pods = cluster
    cp = plan(pools, nodes, pods, now=NOW)
    for p in cp.nodes:
        assert set(p.label_patch) <= set(c.MANAGED_LABELS)
        assert set(p.annotation_patch) <= {
            c.ANNOTATION_OWNED,
            c.ANNOTATION_PLUGIN_RESTART,
            c.ANNOTATION_CORDONED_BY,
        }
    for before, after in zip(nodes, _apply_all(pools, nodes, pods), strict=True):
        assert _foreign(after.labels) == _foreign(before.labels)


@common
@given(clusters())
def test_restore_after_apply_gives_back_the_original_labels(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]],
) -> None:
    pools, nodes, _ = cluster
    restore_pools = [
        GPUSharePool.model_validate(
            {**p.model_dump(by_alias=True), "spec": {**p.spec.dump(), "cleanup": "Restore"}}
        )
        for p in pools
    ]
    applied = _apply_all(restore_pools, nodes, [])
    names = {p.name for p in restore_pools}
    restored = _apply_all(restore_pools, applied, [], deleting=names)
    for before, after in zip(nodes, restored, strict=True):
        assert c.ANNOTATION_OWNED not in after.annotations
        expected = dict(before.labels)
        if after.labels != before.labels:
            # Only the schedule rule differs: no prior value → "default", never absent.
            assert c.LABEL_SCHEDULE not in before.labels
            expected[c.LABEL_SCHEDULE] = c.SCHEDULE_DEFAULT
        assert dict(after.labels) == expected


@common
@given(clusters())
def test_conflicts_and_skips_change_nothing(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]],
) -> None:
    pools, nodes, pods = cluster
    for p in plan(pools, nodes, pods, now=NOW).nodes:
        if p.action in (Action.CONFLICT, Action.SKIP):
            assert not p.changed and p.node_patch() == {}
        if p.action is Action.CONFLICT:
            assert len(p.conflict_pools) >= 2
        if p.action is Action.HOLD:
            assert p.label_patch == {}


@common
@given(clusters())
def test_restart_only_with_plugin_label_change(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]],
) -> None:
    pools, nodes, pods = cluster
    for p in plan(pools, nodes, pods, now=NOW).nodes:
        if p.restart_plugin:
            assert set(p.label_patch) - {c.LABEL_POOL}
            assert p.plugin_restart_pending


HOST = "kubernetes.io/hostname"


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[GPUSharePool], list[NodeView], list[PodView]]:
    """Clusters whose nodes come in kinds (the same labels but for their hostname), some pools
    selecting by hostname: what lets :class:`PlanMemo` hand one kind's plan to many nodes."""
    pools, nodes, pods = draw(clusters())
    twins = [
        NodeView(f"t{i}", dict(draw(st.sampled_from(nodes)).labels), unschedulable=draw(st.booleans()))
        for i in range(draw(st.integers(0, 6)))
    ]
    nodes = [
        NodeView(
            n.name,
            {**n.labels, HOST: n.name},
            {**n.annotations, c.ANNOTATION_INVENTORY: f'{{"gpus": ["GPU-{n.name}"]}}'},
            n.unschedulable,
        )
        for n in nodes + twins
    ]
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from([n.name for n in nodes]), min_size=1, max_size=3))
        operator = draw(st.sampled_from(["In", "NotIn"]))
        expr = {"key": HOST, "operator": operator, "values": sorted(set(names))}
        pools.append(
            parse_pool(
                {
                    "metadata": {"name": "by-host"},
                    "spec": {"nodeSelector": {"matchExpressions": [expr]}, "memoryIsolation": False},
                }
            )
        )
    return pools, nodes, pods


@common
@given(fleets(), st.data())
def test_a_memo_kept_from_call_to_call_plans_as_without_it(
    cluster: tuple[list[GPUSharePool], list[NodeView], list[PodView]], data: st.DataObject
) -> None:
    """One memo through a rollout (apply, restarts done, a pool deleted, the clock moving on):
    every call plans each node exactly as a call without the memo."""
    pools, nodes, pods = cluster
    memo = PlanMemo()
    deleting: frozenset[str] = frozenset()
    now = NOW
    for _ in range(4):
        subset = data.draw(st.lists(st.sampled_from(nodes), unique_by=lambda n: n.name, min_size=1))
        for views in (nodes, subset):
            with_memo = plan(pools, views, pods, now=now, deleting=deleting, memo=memo)
            assert with_memo == plan(pools, views, pods, now=now, deleting=deleting)
        step = data.draw(st.sampled_from(["apply", "restarts", "delete", "clock"]))
        if step == "apply":
            by_node = with_memo.by_node()
            nodes = [apply_node_patch(n, by_node[n.name]) if n.name in by_node else n for n in nodes]
        elif step == "restarts":
            nodes = _finish_restarts(nodes)
        elif step == "delete" and pools:
            deleting = frozenset({data.draw(st.sampled_from(pools)).name})
        else:
            now += timedelta(seconds=data.draw(st.sampled_from([0, 1, 90])))


def test_a_memo_plans_each_kind_of_node_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """500 nodes alike but for their names, hostnames and GPU inventories: one plan made, 500
    handed out, each with its own node name."""
    spec = {"nodeSelector": {"matchLabels": {NP: "a"}}, "memoryIsolation": False}
    pool = parse_pool({"metadata": {"name": "p0"}, "spec": spec})
    nodes = [
        NodeView(f"n{i}", {NP: "a", HOST: f"n{i}"}, {c.ANNOTATION_INVENTORY: f"GPU-{i}"}) for i in range(500)
    ]
    memo = PlanMemo()
    calls = 0
    real = planner._plan_node

    def counting(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args)

    monkeypatch.setattr(planner, "_plan_node", counting)
    cp = plan([pool], nodes, now=NOW, memo=memo)
    monkeypatch.undo()
    assert calls == 1
    assert [p.node for p in cp.nodes] == sorted(n.name for n in nodes)
    assert cp == plan([pool], nodes, now=NOW)


def test_the_memo_keys_every_annotation_the_planner_reads() -> None:
    """PlanMemo keys a node on PLANNED_ANNOTATIONS only: the planner must read no other."""
    source = Path(planner.__file__).read_text()
    read = {getattr(c, name) for name in re.findall(r"\bc\.(ANNOTATION_\w+)", source)}
    assert read == set(planner.PLANNED_ANNOTATIONS)
