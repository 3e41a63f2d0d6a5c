"""Pool status computed from a plan: counts, capacity, allocation, node list and conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.policy import NodeView, PodView, RestartRecord, apply_node_patch, plan
from gpushare.policy.status import pool_status

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NP = "alibabacloud.com/nodepool-id"
#: What a node's device plugin advertises in a memory-sharing mode (cgpu, share) with 2 GPUs.
ALLOC = {c.RES_GPU_MEM: "30", c.RES_GPU_COUNT: "2"}
#: ... and in core_mem.
CORE_ALLOC = {**ALLOC, c.RES_GPU_CORE: "200"}


def pool(name: str, np: str, status: dict[str, Any] | None = None, **spec: Any) -> GPUSharePool:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "generation": 4},
        "spec": {"nodeSelector": {"matchLabels": {NP: np}}, **spec},
    }
    if status:
        obj["status"] = status
    return parse_pool(obj)


def _status(
    pools: list[GPUSharePool], nodes: list[NodeView], pods: list[PodView], name: str, **kw: Any
) -> dict[str, Any]:
    cp = plan(pools, nodes, pods, now=NOW)
    target = next(p for p in pools if p.name == name)
    return pool_status(target, cp, {n.name: n for n in nodes}, pods, now=NOW, **kw)


def _done(nodes: list[NodeView], pools: list[GPUSharePool]) -> list[NodeView]:
    """The nodes once labelled and their plugin restarted (advertising ALLOC unless given)."""
    cp = plan(pools, nodes, now=NOW).by_node()
    out = []
    for n in (apply_node_patch(n, cp[n.name]) for n in nodes):
        rec = RestartRecord.parse(n.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
        if rec and rec.pending:
            rec = RestartRecord(rec.hash, rec.since, "Done", rec.pool)
            n = NodeView(
                n.name,
                n.labels,
                {**n.annotations, c.ANNOTATION_PLUGIN_RESTART: rec.dump()},
                allocatable=n.allocatable or ALLOC,
            )
        out.append(n)
    return out


def _cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(x for x in status["conditions"] if x["type"] == ctype)


def test_converged_pool_is_ready_with_capacity_and_allocation() -> None:
    pools = [pool("gpu", "a", computeAllocation=True)]
    nodes = _done(
        [
            NodeView("n1", {NP: "a"}, allocatable=CORE_ALLOC),
            NodeView("n2", {NP: "a"}, allocatable=CORE_ALLOC),
        ],
        pools,
    )
    pods = [
        PodView("d", "p1", node_name="n1", phase="Running", requests={c.RES_GPU_MEM: 4, c.RES_GPU_CORE: 30}),
        PodView("d", "p2", node_name="n2", phase="Succeeded", requests={c.RES_GPU_MEM: 8}),
        PodView("d", "p3", node_name="elsewhere", phase="Running", requests={c.RES_GPU_MEM: 8}),
    ]
    st = _status(pools, nodes, pods, "gpu")
    assert st["observedGeneration"] == 4
    assert st["schedule"] == "core_mem"
    assert st["nodes"] == {"matched": 2, "ready": 2, "pending": 0, "held": 0, "conflicting": 0, "failed": 0}
    assert st["capacity"] == {c.RES_GPU_COUNT: "4", c.RES_GPU_MEM: "60", c.RES_GPU_CORE: "400"}
    assert st["allocated"] == {c.RES_GPU_COUNT: "0", c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "30"}
    assert [(x["type"], x["status"], x["reason"]) for x in st["conditions"]] == [
        ("Ready", "True", "AllNodesReady"),
        ("Progressing", "False", "RolloutComplete"),
        ("Degraded", "False", "AsExpected"),
        ("Conflict", "False", "NoConflicts"),
    ]
    assert all(x["observedGeneration"] == 4 for x in st["conditions"])


def test_rolling_out_pool_is_progressing() -> None:
    pools = [pool("gpu", "a")]
    st = _status(pools, [NodeView("n1", {NP: "a"}), NodeView("n2", {NP: "b"})], [], "gpu")
    assert st["nodes"]["matched"] == 1 and st["nodes"]["pending"] == 1
    assert _cond(st, "Ready")["reason"] == "NodesNotReady"
    assert _cond(st, "Progressing")["reason"] == "RollingOut"
    assert st["nodeStatuses"] == [
        {"name": "n1", "phase": "Pending", "reason": "Adopted", "message": "joins pool gpu"}
    ]


def test_held_node_reported() -> None:
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView("n1", {NP: "a"})], pools)
    switched = [pool("gpu", "a", memoryIsolation=False)]
    st = _status(
        switched,
        nodes,
        [PodView("d", "job", node_name="n1", phase="Running", requests={c.RES_GPU_MEM: 2})],
        "gpu",
    )
    assert st["nodes"]["held"] == 1
    prog = _cond(st, "Progressing")
    assert (prog["status"], prog["reason"]) == ("True", "NodesHeld")
    assert "d/job" in prog["message"]
    assert st["nodeStatuses"][0]["phase"] == "Held"


def test_conflict_named_in_both_pools() -> None:
    p1 = pool("p1", "a")
    p2 = parse_pool({"metadata": {"name": "p2"}, "spec": {"nodeSelector": {"matchLabels": {"zone": "z"}}}})
    nodes = [NodeView("n1", {NP: "a", "zone": "z"})]
    for me, other in (("p1", "p2"), ("p2", "p1")):
        st = _status([p1, p2], nodes, [], me)
        cond = _cond(st, "Conflict")
        assert (cond["status"], cond["reason"]) == ("True", "NodesInMultiplePools")
        assert "n1" in cond["message"] and other in cond["message"]
        assert st["nodes"]["conflicting"] == 1 and st["nodes"]["matched"] == 0
        assert _cond(st, "Ready")["reason"] == "NoMatchingNodes"
        assert "1 node(s) are also selected by another pool" in _cond(st, "Ready")["message"]


def test_a_pool_matching_no_node_says_so_with_its_selector() -> None:
    st = _status([pool("gpu", "np-gpu-core")], [NodeView("n1", {NP: "np-a"})], [], "gpu")
    ready = _cond(st, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoMatchingNodes")
    assert ready["message"] == (
        f"spec.nodeSelector {NP}=np-gpu-core selects 0 nodes: no node has these labels "
        f"(kubectl get nodes -l '{NP}=np-gpu-core'); label the pool's nodes or change the selector"
    )
    assert st["nodes"]["matched"] == 0


def test_failed_restart_degrades_and_errors_are_failures() -> None:
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView("n1", {NP: "a"}), NodeView("n2", {NP: "a"})], pools)
    rec = RestartRecord("h", "2026-11-29T11:00:00Z", "Failed", "gpu", "no Ready device plugin pod after 300s")
    nodes[0] = NodeView(
        "n1", nodes[0].labels, {**nodes[0].annotations, c.ANNOTATION_PLUGIN_RESTART: rec.dump()}
    )
    st = _status(pools, nodes, [], "gpu")
    deg = _cond(st, "Degraded")
    assert (deg["status"], deg["reason"]) == ("True", "DevicePluginNotReady")
    assert "n1: no Ready device plugin pod after 300s" in deg["message"]
    assert st["nodeStatuses"][0]["name"] == "n1"  # not-Ready first
    st2 = _status(pools, nodes, [], "gpu", errors={"n2": "HTTP 500"})
    assert st2["nodes"]["failed"] == 2
    assert _cond(st2, "Degraded")["reason"] == "NodesFailed"


def test_transition_time_kept_across_passes() -> None:
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView("n1", {NP: "a"})], pools)
    first = _status(pools, nodes, [], "gpu")
    later = pool("gpu", "a", status=first)
    cp = plan([later], nodes, now=NOW + timedelta(hours=1))
    second = pool_status(later, cp, {n.name: n for n in nodes}, [], now=NOW + timedelta(hours=1))
    assert second["conditions"] == first["conditions"]


def test_node_list_is_bounded_not_ready_first() -> None:
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView(f"n{i:03}", {NP: "a"}) for i in range(120)], pools)
    nodes.append(NodeView("zz-new", {NP: "a"}))
    st = _status(pools, nodes, [], "gpu")
    assert len(st["nodeStatuses"]) == 100
    assert st["nodeStatuses"][0]["name"] == "zz-new"
    assert st["nodes"]["matched"] == 121 and st["nodes"]["ready"] == 120


def test_invalid_pool() -> None:
    pools = [pool("gpu", "a")]
    cp = plan(pools, [], now=NOW, invalid={"gpu": "bad"})
    st = pool_status(pools[0], cp, {}, [], now=NOW)
    assert (_cond(st, "Ready")["reason"], _cond(st, "Degraded")["reason"]) == ("InvalidSpec", "InvalidSpec")


def _with_isolation(nodes: list[NodeView], value: str) -> list[NodeView]:
    return [
        NodeView(
            n.name, {**n.labels, c.LABEL_CGPU_ISOLATION: value}, n.annotations, allocatable=n.allocatable
        )
        for n in nodes
    ]


def test_isolation_absent_on_an_isolated_pool_degrades_the_node_and_the_pool() -> None:
    pools = [pool("iso", "a")]
    nodes = _done(
        [NodeView("n1", {NP: "a"}, allocatable=ALLOC), NodeView("n2", {NP: "a"}, allocatable=ALLOC)], pools
    )
    nodes = [*_with_isolation(nodes[:1], "absent"), *_with_isolation(nodes[1:], "active")]
    st = _status(pools, nodes, [], "iso")
    assert st["nodeStatuses"][0]["name"] == "n1"
    assert st["nodeStatuses"][0]["phase"] == "Degraded"
    assert st["nodeStatuses"][0]["reason"] == "IsolationUnavailable"
    assert "cgpu.isolation=absent" in st["nodeStatuses"][0]["message"]
    degraded = _cond(st, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "IsolationUnavailable")
    assert "n1" in degraded["message"] and "n2" not in degraded["message"]
    assert _cond(st, "Ready")["status"] == "False"
    assert st["nodes"]["ready"] == 1


def test_isolation_absent_is_fine_for_a_pool_without_isolation_and_unknown_is_not_degraded() -> None:
    shared = [pool("shared", "a", memoryIsolation=False)]
    nodes = _with_isolation(_done([NodeView("n1", {NP: "a"}, allocatable=ALLOC)], shared), "absent")
    st = _status(shared, nodes, [], "shared")
    assert _cond(st, "Degraded")["status"] == "False"
    assert _cond(st, "Ready")["status"] == "True"

    isolated = [pool("iso", "a")]
    nodes = _with_isolation(_done([NodeView("n1", {NP: "a"}, allocatable=ALLOC)], isolated), "unknown")
    st = _status(isolated, nodes, [], "iso")
    assert _cond(st, "Degraded")["status"] == "False"
    assert st["nodeStatuses"][0]["phase"] == "Ready"


# --- the effective mode: a node is Ready only once its plugin advertises the pool's mode ------


def _switched_to_core_mem(
    allocatable: dict[str, str], since: datetime, **spec: Any
) -> tuple[list[GPUSharePool], list[NodeView]]:
    """n1 in pool gpu, relabelled for core_mem at ``since``, its restart recorded Done (or Skipped)."""
    pools = [pool("gpu", "a", computeAllocation=True, **spec)]
    nodes = _done([NodeView("n1", {NP: "a"})], pools)
    rec = RestartRecord.parse(nodes[0].annotations.get(c.ANNOTATION_PLUGIN_RESTART))
    assert rec is not None
    never = (spec.get("devicePlugin") or {}).get("restart") == "Never"
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    rec = RestartRecord(
        rec.hash, stamp, "Skipped" if never else "Done", "gpu", "RestartNever" if never else ""
    )
    node = NodeView(
        "n1",
        nodes[0].labels,
        {**nodes[0].annotations, c.ANNOTATION_PLUGIN_RESTART: rec.dump()},
        allocatable=allocatable,
    )
    return pools, [node]


def test_labels_switched_but_plugin_still_advertises_cgpu_is_progressing_then_stale() -> None:
    pools, nodes = _switched_to_core_mem(
        ALLOC, NOW - timedelta(seconds=20), devicePlugin={"readyTimeoutSeconds": 60}
    )
    st = _status(pools, nodes, [], "gpu")
    (entry,) = st["nodeStatuses"]
    assert (entry["phase"], entry["reason"]) == ("Restarting", "PluginModePending")
    assert "cgpu/share resources" in entry["message"]
    assert _cond(st, "Ready")["status"] == "False"
    assert (_cond(st, "Progressing")["status"], _cond(st, "Progressing")["reason"]) == ("True", "RollingOut")
    assert _cond(st, "Degraded")["status"] == "False"
    assert st["nodes"]["ready"] == 0 and st["nodes"]["pending"] == 1

    pools, nodes = _switched_to_core_mem(
        ALLOC, NOW - timedelta(seconds=61), devicePlugin={"readyTimeoutSeconds": 60}
    )
    st = _status(pools, nodes, [], "gpu")
    (entry,) = st["nodeStatuses"]
    assert (entry["phase"], entry["reason"]) == ("Degraded", "PluginModeStale")
    assert entry["message"] == (
        "node advertises cgpu/share resources (aliyun.com/gpu-mem, no gpu-core.percentage) after switching "
        "to core_mem; the device plugin has not picked up the labels"
    )
    degraded = _cond(st, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PluginModeStale")
    assert "n1: node advertises cgpu/share resources" in degraded["message"]
    assert _cond(st, "Progressing")["status"] == "False"
    assert _cond(st, "Ready")["status"] == "False"


def test_plugin_advertising_the_new_mode_makes_the_node_ready() -> None:
    pools, nodes = _switched_to_core_mem(CORE_ALLOC, NOW - timedelta(seconds=1))
    st = _status(pools, nodes, [], "gpu")
    assert st["nodeStatuses"] == [] or st["nodeStatuses"][0]["phase"] == "Ready"
    assert (_cond(st, "Ready")["status"], _cond(st, "Ready")["reason"]) == ("True", "AllNodesReady")


def test_restart_never_names_the_nodes_that_need_a_plugin_restart() -> None:
    pools, nodes = _switched_to_core_mem(ALLOC, NOW - timedelta(seconds=1), devicePlugin={"restart": "Never"})
    st = _status(pools, nodes, [], "gpu")
    (entry,) = st["nodeStatuses"]
    assert (entry["phase"], entry["reason"]) == ("Degraded", "PluginRestartNeeded")
    assert entry["message"].endswith("restart its device plugin pod (devicePlugin.restart is Never)")
    ready = _cond(st, "Ready")
    assert ready["status"] == "False" and "device plugin restart needed on n1" in ready["message"]
    degraded = _cond(st, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "PluginRestartNeeded")
    assert "1 node(s) need a device plugin restart to advertise core_mem resources" in degraded["message"]


def test_core_percentage_left_over_under_cgpu_is_stale_too() -> None:
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView("n1", {NP: "a"}, allocatable=CORE_ALLOC)], pools)
    st = _status(pools, nodes, [], "gpu")
    assert st["nodeStatuses"][0]["reason"] == "PluginModePending"
    assert "core_mem resources" in st["nodeStatuses"][0]["message"]


def test_no_empty_fields_in_the_status() -> None:
    """kubectl describe showed an empty `Message:` on every Ready node: absent values are left out."""
    pools = [pool("gpu", "a")]
    nodes = _done([NodeView("n1", {NP: "a"}), NodeView("n2", {NP: "a"})], pools)
    st = _status(pools, nodes, [], "gpu")
    assert st["nodeStatuses"] == [
        {"name": "n1", "phase": "Ready", "reason": "LabelsApplied"},
        {"name": "n2", "phase": "Ready", "reason": "LabelsApplied"},
    ]
    assert st["capacity"] == {c.RES_GPU_COUNT: "4", c.RES_GPU_MEM: "60"}, "gpu-core only for core_mem"

    def empty(value: Any, path: str) -> list[str]:
        if value in ("", None, [], {}):
            return [path]
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in empty(v, f"{path}.{k}")]
        if isinstance(value, list):
            return [p for i, v in enumerate(value) for p in empty(v, f"{path}[{i}]")]
        return []

    assert empty(st, "status") == []


def test_a_status_written_by_an_older_gpushare_is_read_and_its_old_keys_deleted() -> None:
    """Before the resource lists: status.mode and capacity {gpus, gpuMemGiB, gpuCorePercentage}."""
    from gpushare.policy.status import status_merge_patch

    old_status = {
        "mode": "core_mem",
        "capacity": {"gpus": 4, "gpuMemGiB": 60, "gpuCorePercentage": 400},
        "allocated": {"gpus": 0, "gpuMemGiB": 4, "gpuCorePercentage": 30},
        "nodeStatuses": [{"name": "n1", "phase": "Ready", "reason": "LabelsApplied", "message": ""}],
    }
    p = pool("gpu", "a", status=old_status, computeAllocation=True)
    assert p.status.schedule == "core_mem"
    assert p.status.capacity == {c.RES_GPU_COUNT: "4", c.RES_GPU_MEM: "60", c.RES_GPU_CORE: "400"}
    nodes = _done([NodeView("n1", {NP: "a"}, allocatable=CORE_ALLOC)], [p])
    new = _status([p], nodes, [], "gpu")
    patch = status_merge_patch(new, old_status)
    assert patch["capacity"] == {
        c.RES_GPU_COUNT: "2",
        c.RES_GPU_MEM: "30",
        c.RES_GPU_CORE: "200",
        "gpus": None,
        "gpuMemGiB": None,
        "gpuCorePercentage": None,
    }
    # A pool that leaves core_mem: its gpu-core.percentage goes from the stored list too.
    cgpu = _status([pool("gpu", "a")], _done([NodeView("n1", {NP: "a"})], [pool("gpu", "a")]), [], "gpu")
    assert status_merge_patch(cgpu, new)["capacity"][c.RES_GPU_CORE] is None
    assert status_merge_patch(new, new) == new


def test_a_status_the_operator_cannot_read_does_not_make_the_pool_invalid() -> None:
    p = pool("gpu", "a", status={"nodes": {"matched": "many"}, "future": True})
    assert p.spec.node_selector.match_labels == {NP: "a"}
    assert p.status.conditions == [] and p.status.schedule is None


def test_unregistered_plugin_degrades_and_kubelet_refused_gpu_pods_are_named() -> None:
    """A real kubelet whose plugin is gone: capacity kept, allocatable 0; a GPU pod bound meanwhile
    fails admission (status.reason UnexpectedAdmissionError). Long after the label change."""
    pools = [pool("gpu", "a")]
    done = _done([NodeView("n1", {NP: "a"}), NodeView("n2", {NP: "a"})], pools)
    gone = NodeView(
        "n1",
        done[0].labels,
        done[0].annotations,
        allocatable={c.RES_GPU_MEM: "0", c.RES_GPU_COUNT: "2"},
        capacity={c.RES_GPU_MEM: "30", c.RES_GPU_COUNT: "2"},
    )
    nodes = [gone, done[1]]
    refused = PodView(
        "d",
        "bound",
        node_name="n1",
        phase="Failed",
        requests={c.RES_GPU_MEM: 2},
        reason="UnexpectedAdmissionError",
    )
    other = PodView(
        "d", "oom", node_name="n2", phase="Failed", requests={c.RES_GPU_MEM: 2}, reason="OOMKilled"
    )
    later = NOW + timedelta(hours=1)
    cp = plan(pools, nodes, [refused, other], now=later)
    st = pool_status(pools[0], cp, {n.name: n for n in nodes}, [refused, other], now=later)
    by_node = {s["name"]: s for s in st["nodeStatuses"]}
    assert (by_node["n1"]["phase"], by_node["n1"]["reason"]) == ("Degraded", "PluginNotRegistered")
    assert by_node["n2"]["phase"] == "Ready"
    ready, degraded = _cond(st, "Ready"), _cond(st, "Degraded")
    assert ready["status"] == "False"
    assert "device plugin not registered on n1" in ready["message"]
    assert "GPU pods refused by the kubelet (UnexpectedAdmissionError): d/bound on n1" in ready["message"]
    assert "oom" not in ready["message"]
    assert (degraded["status"], degraded["reason"]) == ("True", "PluginNotRegistered")
    assert "d/bound on n1" in degraded["message"]
