"""maxUnavailable pacing of disrupting node changes (policy.rollout)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.policy import NodeView, PodView, RestartRecord, apply_node_patch, plan
from gpushare.policy.rollout import in_flight, select_batch

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"


def pool(**spec: Any) -> GPUSharePool:
    return parse_pool(
        {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"matchLabels": {NP: "a"}}, **spec}}
    )


def nodes(n: int) -> list[NodeView]:
    return [NodeView(f"n{i}", {NP: "a"}) for i in range(n)]


@pytest.mark.parametrize(
    ("max_unavailable", "n", "expected"),
    [
        pytest.param(1, 5, 1, id="one"),
        pytest.param(2, 5, 2, id="two"),
        pytest.param("50%", 5, 3, id="half-rounds-up"),
        pytest.param("100%", 5, 5, id="all"),
        pytest.param(10, 3, 3, id="more-than-nodes"),
    ],
)
def test_first_batch_size(max_unavailable: int | str, n: int, expected: int) -> None:
    p = pool(rollout={"maxUnavailable": max_unavailable})
    cp = plan([p], nodes(n), now=NOW)
    batch = select_batch("gpu", p.spec.rollout, cp.nodes)
    assert len(batch) == expected
    assert [b.node for b in batch] == [f"n{i}" for i in range(expected)]


def test_pending_restarts_use_the_budget_until_done() -> None:
    p = pool(rollout={"maxUnavailable": 2})
    state = nodes(5)
    cp = plan([p], state, now=NOW)
    first = {b.node: b for b in select_batch("gpu", p.spec.rollout, cp.nodes)}
    state = [apply_node_patch(n, first[n.name]) if n.name in first else n for n in state]
    cp = plan([p], state, now=NOW)
    assert sorted(in_flight("gpu", cp.nodes)) == ["n0", "n1"]
    assert select_batch("gpu", p.spec.rollout, cp.nodes) == []


def test_non_disrupting_changes_always_go() -> None:
    p = pool(devicePlugin={"restart": "Never"})
    cp = plan([p], nodes(4), now=NOW)
    assert len(select_batch("gpu", p.spec.rollout, cp.nodes)) == 4


def test_cordons_count() -> None:
    base = pool(rollout={"modeSwitch": "Cordon"})
    state = nodes(3)
    cp = plan([base], state, now=NOW).by_node()
    state = [_restart_done(apply_node_patch(n, cp[n.name])) for n in state]
    switched = pool(memoryIsolation=False, rollout={"modeSwitch": "Cordon"})
    pods = [
        PodView("d", f"job{i}", node_name=f"n{i}", phase="Running", requests={c.RES_GPU_MEM: 1})
        for i in range(3)
    ]
    cp2 = plan([switched], state, pods, now=NOW)
    batch = select_batch("gpu", switched.spec.rollout, cp2.nodes)
    assert [(b.node, b.cordon) for b in batch] == [("n0", True)]
    state = [apply_node_patch(n, batch[0]) if n.name == "n0" else n for n in state]
    cp3 = plan([switched], state, pods, now=NOW)
    assert in_flight("gpu", cp3.nodes) == ["n0"]
    assert select_batch("gpu", switched.spec.rollout, cp3.nodes) == []


def _restart_done(n: NodeView) -> NodeView:
    rec = RestartRecord.parse(n.annotations[c.ANNOTATION_PLUGIN_RESTART])
    assert rec is not None
    done = RestartRecord(rec.hash, rec.since, "Done", rec.pool)
    return NodeView(n.name, n.labels, {**n.annotations, c.ANNOTATION_PLUGIN_RESTART: done.dump()})


def test_restores_are_paced_too() -> None:
    p = pool()
    state = [
        _restart_done(n)
        for n in (apply_node_patch(n, plan([p], nodes(3), now=NOW).by_node()[n.name]) for n in nodes(3))
    ]
    cp = plan([p], state, now=NOW, deleting={"gpu"})
    first = select_batch("gpu", p.spec.rollout, cp.nodes)
    assert [(b.node, b.action.value, b.restart_plugin) for b in first] == [("n0", "Restore", True)]
    state = [apply_node_patch(n, first[0]) if n.name == "n0" else n for n in state]
    cp = plan([p], state, now=NOW, deleting={"gpu"})
    # n0 left the pool but its plugin restart is still owed by "gpu": nothing else may start.
    assert in_flight("gpu", cp.nodes) == ["n0"]
    assert select_batch("gpu", p.spec.rollout, cp.nodes) == []
    assert [x.node for x in cp.for_pool("gpu")] == ["n0", "n1", "n2"]


# --- the decide step (policy.decide): what one pass of a pool does --------------------------------


def test_decide_leaves_nodes_another_pass_is_writing_and_counts_them_waiting() -> None:
    from gpushare.policy.decide import FAST_REQUEUE, decide, settle

    p = pool(rollout={"maxUnavailable": 2})
    cp = plan([p], nodes(4), now=NOW)
    first = decide("gpu", cp.nodes, rollouts={"gpu": p.spec.rollout}, live={"gpu"}, orphans=True)
    assert [x.node for x in first.patches] == ["n0", "n1"]
    assert first.waiting == 2
    busy = decide("gpu", cp.nodes, rollouts={"gpu": p.spec.rollout}, live={"gpu"}, orphans=True, busy={"n0"})
    assert [x.node for x in busy.patches] == ["n1"] and busy.waiting == 3
    settled = settle("gpu", cp.nodes, waiting=busy.waiting, restarting=False, failed_writes=False)
    assert settled.requeue == FAST_REQUEUE


def test_related_pools_route_vanished_pools_to_the_orphan_handler() -> None:
    from gpushare.policy.decide import ORPHANS, acts_on, related_pools

    gone = NodeView(
        "n0",
        {NP: "b", c.LABEL_SCHEDULE: "cgpu"},
        {c.ANNOTATION_OWNED: '{"pool":"old","prior":{}}'},
    )
    p = pool()
    (np,) = plan([p], [gone], now=NOW).nodes
    assert np.pool == "old"
    assert related_pools(np, {"gpu"}) == {ORPHANS}
    assert acts_on("gpu", np, {"gpu"}, orphans=True)
    assert not acts_on("gpu", np, {"gpu"}, orphans=False)
    (mine,) = plan([p], nodes(1), now=NOW).nodes
    assert related_pools(mine, {"gpu"}) == {"gpu"}


def test_restarts_owed_by_a_vanished_pool_go_to_the_first_pool() -> None:
    from gpushare.policy.decide import restarts_owed

    owed = RestartRecord("h", "2026-11-29T12:00:01Z", "Pending", "old")
    done = RestartRecord("h", "2026-11-29T12:00:01Z", "Done", "gpu")
    mine = RestartRecord("h", "2026-11-29T12:00:01Z", "Failed", "gpu")
    records = [("a", owed), ("b", done), ("c", mine), ("d", None)]
    assert [n for n, _ in restarts_owed("gpu", records, {"gpu"}, orphans=True)] == ["a", "c"]
    assert [n for n, _ in restarts_owed("gpu", records, {"gpu"}, orphans=False)] == ["c"]
