"""After a pool is deleted, nothing gpushare wrote stays on its nodes (issue 24, point 8).

The restore patch and the record of the plugin restart that follows it are pure
(``policy.planner.plan`` and ``restart_outcome_patch``); the reconciler sends them as they are.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.policy import NodeView, PodView, RestartRecord, apply_node_patch, plan
from gpushare.policy.planner import restart_outcome_patch

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"
#: Every annotation gpushare writes on a node for a pool (the agent's inventory is the node's own).
POOL_ANNOTATIONS = (c.ANNOTATION_OWNED, c.ANNOTATION_PLUGIN_RESTART, c.ANNOTATION_CORDONED_BY)
BEFORE = {NP: "a", "team": "ml"}


def pool(**spec: Any) -> GPUSharePool:
    return parse_pool(
        {"metadata": {"name": "gpu"}, "spec": {"nodeSelector": {"matchLabels": {NP: "a"}}, **spec}}
    )


def merge(node: NodeView, patch: dict[str, Any]) -> NodeView:
    """``patch`` (a merge patch of labels/annotations/unschedulable) applied to ``node``."""
    annotations = dict(node.annotations)
    for key, value in (patch.get("metadata") or {}).get("annotations", {}).items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    unschedulable = node.unschedulable
    if "spec" in patch:
        unschedulable = bool(patch["spec"].get("unschedulable"))
    return replace(node, annotations=annotations, unschedulable=unschedulable)


def plugin_restarted(node: NodeView) -> NodeView:
    """What the operator writes once a new plugin pod is Ready on ``node`` (if a restart is owed)."""
    record = RestartRecord.parse(node.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
    if record is None or not record.pending:
        return node
    done = RestartRecord(record.hash, record.since, "Done", record.pool, "Restarted")
    return merge(node, restart_outcome_patch(node, done))


def step(p: GPUSharePool, node: NodeView, pods: list[PodView] | None = None, **kw: Any) -> NodeView:
    (np,) = plan([p], [node], pods or [], now=NOW, **kw).nodes
    return plugin_restarted(apply_node_patch(node, np))


def gpushare_annotations(node: NodeView) -> dict[str, str]:
    return {k: v for k, v in node.annotations.items() if k in POOL_ANNOTATIONS}


@pytest.mark.parametrize("restart", ["Rolling", "Never"])
def test_restore_leaves_no_annotation_naming_the_deleted_pool(restart: str) -> None:
    p = pool(devicePlugin={"restart": restart})
    node = step(p, NodeView("n0", BEFORE))
    assert node.labels[c.LABEL_SCHEDULE] == "cgpu"
    assert set(gpushare_annotations(node)) == {c.ANNOTATION_OWNED, c.ANNOTATION_PLUGIN_RESTART}

    restored = step(p, node, deleting={"gpu"})
    assert gpushare_annotations(restored) == {}, "a record naming the deleted pool stays"
    assert dict(restored.labels) == {**BEFORE, c.LABEL_SCHEDULE: c.SCHEDULE_DEFAULT}
    # and nothing is left to do
    assert plan([p], [restored], now=NOW, deleting={"gpu"}).changes() == []


def test_the_restore_records_its_restart_until_the_plugin_is_back() -> None:
    p = pool()
    node = step(p, NodeView("n0", BEFORE))
    (np,) = plan([p], [node], now=NOW, deleting={"gpu"}).nodes
    assert np.restart_plugin
    restoring = apply_node_patch(node, np)
    record = RestartRecord.parse(restoring.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
    assert record is not None and record.pending and record.pool == "gpu"
    failed = RestartRecord(record.hash, record.since, "Failed", record.pool, "timed out")
    assert restart_outcome_patch(restoring, failed) == {
        "metadata": {"annotations": {c.ANNOTATION_PLUGIN_RESTART: failed.dump()}}
    }, "a Failed restart stays recorded (reported until a plugin gets Ready)"


def test_a_node_in_a_pool_keeps_its_restart_record() -> None:
    p = pool()
    node = apply_node_patch(NodeView("n0", BEFORE), plan([p], [NodeView("n0", BEFORE)], now=NOW).nodes[0])
    record = RestartRecord.parse(node.annotations[c.ANNOTATION_PLUGIN_RESTART])
    assert record is not None
    done = RestartRecord(record.hash, record.since, "Done", record.pool, "Restarted")
    patch = restart_outcome_patch(node, done)
    assert patch == {"metadata": {"annotations": {c.ANNOTATION_PLUGIN_RESTART: done.dump()}}}


def test_a_restore_gives_back_the_cordon_it_made_once_the_plugin_is_back() -> None:
    p = pool(rollout={"modeSwitch": "Cordon"})
    node = step(p, NodeView("n0", BEFORE))
    pods = [PodView("d", "job", node_name="n0", phase="Running", requests={c.RES_GPU_MEM: 2})]
    held = step(p, node, pods, deleting={"gpu"})  # restore cgpu -> default under a GPU pod: cordon
    assert held.unschedulable and held.annotations[c.ANNOTATION_CORDONED_BY] == "gpu"
    restored = step(p, held, [], deleting={"gpu"})  # the pod ended: restore, restart, uncordon
    assert gpushare_annotations(restored) == {}
    assert not restored.unschedulable


def test_an_administrators_cordon_is_kept() -> None:
    p = pool()
    node = replace(step(p, NodeView("n0", BEFORE)), unschedulable=True)
    restored = step(p, node, deleting={"gpu"})
    assert gpushare_annotations(restored) == {}
    assert restored.unschedulable, "gpushare did not cordon it: it stays cordoned"


def test_retain_leaves_no_restart_record_either() -> None:
    p = pool(cleanup="Retain")
    node = step(p, NodeView("n0", BEFORE))
    released = step(p, node, deleting={"gpu"})
    assert gpushare_annotations(released) == {}
    assert released.labels[c.LABEL_SCHEDULE] == "cgpu", "Retain keeps the ACK labels"
    assert c.LABEL_POOL not in released.labels
