"""The operator (``gpushare run``, a real subprocess) against the real control plane (issue 4).

Fixtures:

- ``start_operator()``: starts ``gpushare run --kubeconfig <cluster>`` (JSON logs to a file,
  metrics on a free port) and returns an ``OperatorProc``; every one started is stopped at the end.
- ``operator``: one started operator.
- ``pools``: creates/patches/deletes GPUSharePools; at teardown (while the operator still runs)
  deletes every pool it created and waits until the finalizer is gone.
- helpers to read nodes, plugin pods and events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster, wait_for
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet, plugin_pods_on, wait_plugin_registered
from gpushare.devcluster.pluginsim import ANNOTATION_HANG, ANNOTATION_STATE
from support.operator_proc import OperatorProc
from support.pools import MERGE, PoolApi
from support.recorder import WatchRecorder

#: The generated stubs do not list ``_content_type``; the client accepts it.
JSON_PATCH: dict[str, Any] = {"_content_type": "application/json-patch+json"}


def np_id() -> str:
    return f"np-{secrets.token_hex(3)}"


class Pools(PoolApi):
    async def create(self, name: str, nodepool: str, **spec: Any) -> dict[str, Any]:
        return await self.create_pool(name, {POOL_LABEL: nodepool}, **spec)

    async def delete(self, name: str, *, wait: bool = True, timeout_s: float = 60) -> None:
        try:
            await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        if wait:

            async def gone() -> bool:
                return await self.get(name) is None

            await wait_for(
                gone, what=f"GPUSharePool {name} to be deleted (finalizer removed)", timeout_s=timeout_s
            )

    async def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        obj = await self.get(name)
        for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return dict(cond)
        return None

    async def wait_condition(
        self, name: str, ctype: str, status: str, reason: str | None = None, timeout_s: float = 60
    ) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            cond = await self.condition(name, ctype)
            if cond and cond["status"] == status and (reason is None or cond["reason"] == reason):
                return cond
            return None

        what = f"GPUSharePool {name} {ctype}={status}" + (f" ({reason})" if reason else "")
        result: dict[str, Any] = await wait_for(check, what=what, timeout_s=timeout_s)
        return result


@pytest.fixture
async def pools(api: client.ApiClient, operator: OperatorProc) -> AsyncIterator[Pools]:
    helper = Pools(api)
    yield helper
    for name in helper.created:
        try:
            await helper.delete(name, timeout_s=45)
        except TimeoutError:
            # Leave the cluster usable for the next test even if cleanup is stuck.
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
            raise


async def node_labels(api: client.ApiClient, name: str) -> dict[str, str]:
    node = await client.CoreV1Api(api).read_node(name)
    return dict(node.metadata.labels or {})


async def node_obj(api: client.ApiClient, name: str) -> Any:
    return await client.CoreV1Api(api).read_node(name)


def managed(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k in c.MANAGED_LABELS}


def foreign(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in c.MANAGED_LABELS}


async def wait_labels(
    api: client.ApiClient, nodes: list[str], expected: Mapping[str, str | None], timeout_s: float = 60
) -> None:
    """Wait until every node has ``expected`` managed labels (None = absent)."""

    async def check() -> bool:
        for name in nodes:
            labels = await node_labels(api, name)
            for key, value in expected.items():
                if labels.get(key) != value:
                    return False
        return True

    await wait_for(check, what=f"labels {expected} on {nodes}", timeout_s=timeout_s)


async def plugin_pod_uids(api: client.ApiClient, node: str) -> set[str]:
    selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        c.DEFAULT_PLUGIN_NAMESPACE, label_selector=selector, field_selector=f"spec.nodeName={node}"
    )
    return {p.metadata.uid for p in pods.items if p.metadata.deletion_timestamp is None}


def restart_record(node: Any) -> dict[str, Any] | None:
    raw = (node.metadata.annotations or {}).get(c.ANNOTATION_PLUGIN_RESTART)
    return json.loads(raw) if raw else None


async def wait_restarts_done(api: client.ApiClient, nodes: list[str], timeout_s: float = 60) -> None:
    async def check() -> bool:
        for name in nodes:
            record = restart_record(await node_obj(api, name))
            if record is None or record["state"] != "Done":
                return False
        return True

    await wait_for(check, what=f"device plugin restarts Done on {nodes}", timeout_s=timeout_s)


async def pool_events(api: client.ApiClient, pool: str, namespace: str = "default") -> list[Any]:
    events = await client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind={c.KIND},involvedObject.name={pool}"
    )
    return list(events.items)


async def wait_event(api: client.ApiClient, pool: str, reason: str, timeout_s: float = 30) -> Any:
    async def check() -> Any:
        for event in await pool_events(api, pool):
            if event.reason == reason:
                return event
        return None

    return await wait_for(check, what=f"Event {reason} on GPUSharePool {pool}", timeout_s=timeout_s)


async def gpu_pod(
    api: client.ApiClient,
    namespace: str,
    node: str,
    name: str = "gpu-job",
    mem: int = 2,
    labels: dict[str, str] | None = None,
) -> str:
    """A running pod using aliyun.com/gpu-mem, bound directly to ``node`` (kwok runs it)."""
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.invalid/cuda-sample:fake",
                    "resources": {"limits": {c.RES_GPU_MEM: str(mem)}},
                }
            ],
        },
    }
    await core.create_namespaced_pod(namespace, cast(Any, body))

    async def running() -> bool:
        pod = await core.read_namespaced_pod(name, namespace)
        return bool(pod.status.phase == "Running")

    await wait_for(running, what=f"pod {namespace}/{name} Running on {node}", timeout_s=30)
    return name


#: The annotations gpushare writes on a node for a pool (the node agent's inventory is the node's own).
POOL_ANNOTATIONS = (c.ANNOTATION_OWNED, c.ANNOTATION_PLUGIN_RESTART, c.ANNOTATION_CORDONED_BY)

#: A label gpushare does not own, changed on a node to wake the pools that select it.
NUDGE_LABEL = "gpushare-test/nudge"


async def observed(api: client.ApiClient, op: OperatorProc, pool: str, node: str) -> None:
    """Return once ``op`` has run a whole reconcile pass of ``pool`` that started after this call.

    Before asserting that the operator did *not* change something: a pass already running when
    this is called may end without having seen the present state, so the pass count must advance
    by two. Each poll changes the label ``NUDGE_LABEL`` on ``node`` (the operator sees every
    label, so that wakes the pool: a settled pool would otherwise run its next pass only at the
    periodic resync); the label is removed again before returning.
    """
    core = client.CoreV1Api(api)
    start = op.passes(pool)
    nudges = 0

    async def advanced() -> bool:
        nonlocal nudges
        if op.passes(pool) >= start + 2:
            return True
        nudges += 1
        await core.patch_node(node, {"metadata": {"labels": {NUDGE_LABEL: str(nudges)}}}, **MERGE)
        return False

    try:
        await wait_for(
            advanced, what=f"two reconcile passes of {pool} (from {start})", timeout_s=60, interval=0.5
        )
    finally:
        await core.patch_node(node, {"metadata": {"labels": {NUDGE_LABEL: None}}}, **MERGE)


# --- tests -------------------------------------------------------------------------------------

CGPU = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "false",
    c.LABEL_SCHEDULE: "cgpu",
    c.LABEL_PLACEMENT: "binpack",
}
SHARE = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "true",
    c.LABEL_SCHEDULE: "share",
    c.LABEL_PLACEMENT: "binpack",
}


async def test_seed_scenario_labels_plugins_status_and_restore(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np_iso, np_noiso = np_id(), np_id()
    iso = await fake_nodes.create(2, prefix="cgpu", pool_labels={POOL_LABEL: np_iso}, gpus_per_node=2,
                                  extra_labels={"team": "vision"})  # fmt: skip
    noiso = await fake_nodes.create(2, prefix="share", pool_labels={POOL_LABEL: np_noiso}, gpus_per_node=1)
    before = {n: await node_labels(api, n) for n in iso + noiso}

    async def every_node_has_its_plugin() -> dict[str, set[str]] | None:
        found = {n: await plugin_pod_uids(api, n) for n in iso + noiso}
        return found if all(found.values()) else None

    # The stand-in DaemonSet runs a plugin pod on every fake GPU node, once its controller has
    # seen the new nodes (seconds on a loaded machine): the pods the operator must replace.
    plugins_before = await wait_for(
        every_node_has_its_plugin, what="a plugin pod on every fake GPU node", timeout_s=60
    )

    p_iso, p_noiso = f"cgpu-{np_iso}", f"cgpu-no-isolation-{np_noiso}"
    await pools.create(p_iso, np_iso)
    await pools.create(p_noiso, np_noiso, memoryIsolation=False)

    await wait_labels(api, iso, {**CGPU, c.LABEL_POOL: p_iso})
    await wait_labels(api, noiso, {**SHARE, c.LABEL_POOL: p_noiso})
    await wait_restarts_done(api, iso + noiso)
    await pools.wait_condition(p_iso, "Ready", "True", "AllNodesReady")
    await pools.wait_condition(p_noiso, "Ready", "True", "AllNodesReady")

    for n in iso + noiso:
        labels = await node_labels(api, n)
        assert foreign(labels) == foreign(before[n]), f"foreign labels of {n} changed"
        now_uids = await plugin_pod_uids(api, n)
        assert now_uids and not (now_uids & plugins_before[n]), f"plugin pod on {n} was not replaced"

    obj = await pools.get(p_iso)
    assert obj is not None
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["schedule"] == "cgpu"
    assert status["nodes"]["matched"] == 2 and status["nodes"]["ready"] == 2
    assert status["capacity"] == {c.RES_GPU_COUNT: "4", c.RES_GPU_MEM: "64"}
    noiso_status = (await pools.get(p_noiso) or {})["status"]
    assert noiso_status["capacity"] == {c.RES_GPU_COUNT: "2", c.RES_GPU_MEM: "32"}
    reasons = {e.reason for e in await pool_events(api, p_iso)}
    assert {"LabelsApplied", "DevicePluginRestarted"} <= reasons

    # One label patch per changed node: 4 nodes, 4 label patches, no more.
    assert operator.sum_metric("gpushare_label_patches_total") == 4

    # Deletion restores: no prior schedule -> "default", the rest removed; foreign labels intact.
    await pools.delete(p_iso)
    for n in iso:
        labels = await node_labels(api, n)
        assert managed(labels) == {c.LABEL_SCHEDULE: "default"}
        assert foreign(labels) == foreign(before[n])
        annotations = (await node_obj(api, n)).metadata.annotations or {}
        assert not set(annotations) & set(POOL_ANNOTATIONS), f"{n} keeps {sorted(annotations)}"
    await wait_event(api, p_iso, "CleanupDone")


class PendingTracker(WatchRecorder):
    """Watches nodes of a node pool and records the most nodes with a restart Pending at once."""

    def __init__(self, api: client.ApiClient, nodepool: str) -> None:
        super().__init__(client.CoreV1Api(api).list_node, label_selector=f"{POOL_LABEL}={nodepool}")
        self.pending: set[str] = set()
        self.max_pending = 0
        self.ever_pending: set[str] = set()

    def seen(self, node: Any) -> None:
        record = restart_record(node)
        name = node.metadata.name
        if record is not None and record["state"] == "Pending":
            self.pending.add(name)
            self.ever_pending.add(name)
        else:
            self.pending.discard(name)
        self.max_pending = max(self.max_pending, len(self.pending))


class PluginPodTracker(WatchRecorder):
    """Records every device-plugin pod UID seen per node (to count restarts)."""

    def __init__(self, api: client.ApiClient) -> None:
        selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
        core = client.CoreV1Api(api)
        super().__init__(core.list_namespaced_pod, c.DEFAULT_PLUGIN_NAMESPACE, label_selector=selector)
        self.uids: dict[str, set[str]] = {}

    def seen(self, pod: Any) -> None:
        if pod.spec.node_name:
            self.uids.setdefault(pod.spec.node_name, set()).add(pod.metadata.uid)


async def test_toggle_isolation_rolls_restarts_within_max_unavailable(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(5, prefix="roll", pool_labels={POOL_LABEL: np})
    name = f"roll-{np}"
    await pools.create(name, np, rollout={"maxUnavailable": 2})
    await wait_labels(api, nodes, {**CGPU, c.LABEL_POOL: name})
    await wait_restarts_done(api, nodes)
    await pools.wait_condition(name, "Ready", "True")
    plugins = {n: await plugin_pod_uids(api, n) for n in nodes}
    deleted_before = operator.sum_metric("gpushare_plugin_restarts_total", result="deleted")

    async with PendingTracker(api, np) as tracker:
        await pools.patch_spec(name, {"memoryIsolation": False})
        await wait_labels(api, nodes, {**SHARE, c.LABEL_POOL: name})
        await wait_restarts_done(api, nodes)
        await pools.wait_condition(name, "Ready", "True")
    assert tracker.ever_pending == set(nodes), "every node owed a restart"
    assert 1 <= tracker.max_pending <= 2, f"{tracker.max_pending} nodes restarting at once (maxUnavailable 2)"
    for n in nodes:
        assert not (await plugin_pod_uids(api, n) & plugins[n]), f"plugin on {n} not restarted"
    assert operator.sum_metric("gpushare_plugin_restarts_total", result="deleted") - deleted_before == 5


async def test_compute_allocation_switches_to_core_mem(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(1, prefix="core", pool_labels={POOL_LABEL: np}, core_percentage=True)
    name = f"core-{np}"
    await pools.create(name, np)
    await wait_labels(api, nodes, {c.LABEL_SCHEDULE: "cgpu"})
    await pools.patch_spec(name, {"computeAllocation": True})
    await wait_labels(api, nodes, {c.LABEL_SCHEDULE: "core_mem", c.LABEL_DISABLE_ISOLATION: "false"})
    await wait_restarts_done(api, nodes)
    await pools.wait_condition(name, "Ready", "True")
    obj = await pools.get(name)
    assert obj is not None
    assert obj["status"]["schedule"] == "core_mem"
    assert obj["status"]["capacity"][c.RES_GPU_CORE] == "100"


async def _switch_setup(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: Pools, namespace: str, policy: str
) -> tuple[str, str, str]:
    np = np_id()
    (node,) = await fake_nodes.create(1, prefix=policy.lower(), pool_labels={POOL_LABEL: np})
    name = f"{policy.lower()}-{np}"
    await pools.create(name, np, rollout={"modeSwitch": policy})
    await wait_labels(api, [node], {**CGPU, c.LABEL_POOL: name})
    await wait_restarts_done(api, [node])
    pod = await gpu_pod(api, namespace, node)
    return node, name, pod


async def test_mode_switch_wait_holds_until_the_gpu_pod_is_gone(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, namespace: str
) -> None:
    node, name, pod = await _switch_setup(api, fake_nodes, pools, namespace, "Wait")
    await pools.patch_spec(name, {"memoryIsolation": False})
    cond = await pools.wait_condition(name, "Progressing", "True", "NodesHeld")
    assert node in cond["message"] and pod in cond["message"]
    await wait_event(api, name, "NodeHeld")
    await observed(api, operator, name, node)
    assert managed(await node_labels(api, node))[c.LABEL_SCHEDULE] == "cgpu", "held: no label change"
    assert not (await node_obj(api, node)).spec.unschedulable
    obj = await pools.get(name)
    assert obj is not None and obj["status"]["nodes"]["held"] == 1

    await client.CoreV1Api(api).delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    await wait_labels(api, [node], {**SHARE, c.LABEL_POOL: name})
    await wait_restarts_done(api, [node])
    await pools.wait_condition(name, "Progressing", "False")


async def test_mode_switch_cordon_cordons_waits_and_uncordons(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, namespace: str
) -> None:
    node, name, pod = await _switch_setup(api, fake_nodes, pools, namespace, "Cordon")
    await pools.patch_spec(name, {"memoryIsolation": False})

    async def cordoned() -> bool:
        n = await node_obj(api, node)
        return (
            bool(n.spec.unschedulable)
            and (n.metadata.annotations or {}).get(c.ANNOTATION_CORDONED_BY) == name
        )

    await wait_for(cordoned, what=f"{node} cordoned by {name}", timeout_s=30)
    assert managed(await node_labels(api, node))[c.LABEL_SCHEDULE] == "cgpu"
    await client.CoreV1Api(api).delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    await wait_labels(api, [node], {**SHARE})

    async def uncordoned() -> bool:
        n = await node_obj(api, node)
        return not n.spec.unschedulable and c.ANNOTATION_CORDONED_BY not in (n.metadata.annotations or {})

    await wait_for(uncordoned, what=f"{node} uncordoned", timeout_s=30)
    record = restart_record(await node_obj(api, node))
    assert record is not None and record["state"] == "Done"


async def test_mode_switch_evict_honours_pdb(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, namespace: str
) -> None:
    node, name, pod = await _switch_setup(api, fake_nodes, pools, namespace, "Evict")
    policy = client.PolicyV1Api(api)
    await policy.create_namespaced_pod_disruption_budget(
        namespace,
        cast(
            Any,
            {
                "metadata": {"name": "keep-one"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": pod}}},
            },
        ),
    )

    async def pdb_computed() -> bool:
        pdb = await policy.read_namespaced_pod_disruption_budget("keep-one", namespace)
        return pdb.status is not None and pdb.status.expected_pods == 1

    await wait_for(pdb_computed, what="PDB status computed by the disruption controller", timeout_s=30)
    await pools.patch_spec(name, {"memoryIsolation": False})

    async def blocked() -> bool:
        return operator.sum_metric("gpushare_evictions_total", result="blocked") >= 1

    await wait_for(blocked, what="an eviction blocked by the PDB", timeout_s=30)
    core = client.CoreV1Api(api)
    assert (await core.read_namespaced_pod(pod, namespace)).metadata.deletion_timestamp is None
    n = await node_obj(api, node)
    assert n.spec.unschedulable and managed(n.metadata.labels)[c.LABEL_SCHEDULE] == "cgpu"

    await policy.delete_namespaced_pod_disruption_budget("keep-one", namespace)
    await wait_labels(api, [node], {**SHARE}, timeout_s=60)
    assert operator.sum_metric("gpushare_evictions_total", result="evicted") >= 1

    async def uncordoned() -> bool:
        return not (await node_obj(api, node)).spec.unschedulable

    await wait_for(uncordoned, what=f"{node} uncordoned", timeout_s=30)


async def test_admin_cordon_is_preserved(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, namespace: str
) -> None:
    node, name, pod = await _switch_setup(api, fake_nodes, pools, namespace, "Cordon")
    core = client.CoreV1Api(api)
    await core.patch_node(node, {"spec": {"unschedulable": True}})  # the administrator's cordon
    await pools.patch_spec(name, {"memoryIsolation": False})
    await pools.wait_condition(name, "Progressing", "True", "NodesHeld")
    assert c.ANNOTATION_CORDONED_BY not in ((await node_obj(api, node)).metadata.annotations or {})
    await core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
    await wait_labels(api, [node], {**SHARE})
    await wait_restarts_done(api, [node])
    await pools.wait_condition(name, "Progressing", "False")
    await observed(api, operator, name, node)
    assert (await node_obj(api, node)).spec.unschedulable, "gpushare must not lift an administrator's cordon"


async def test_drift_is_corrected_without_a_second_restart(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    (node,) = await fake_nodes.create(1, prefix="drift", pool_labels={POOL_LABEL: np})
    name = f"drift-{np}"
    await pools.create(name, np)
    await wait_labels(api, [node], CGPU)
    await wait_restarts_done(api, [node])
    plugin = await plugin_pod_uids(api, node)
    await client.CoreV1Api(api).patch_node(
        node, {"metadata": {"labels": {c.LABEL_DISABLE_ISOLATION: "true", "owner": "someone"}}}
    )
    event = await wait_event(api, name, "DriftCorrected")
    # The Event names the label put back as key=value, not as a Python dict.
    assert event.message.endswith(f"{node}: {c.LABEL_DISABLE_ISOLATION}=false"), event.message
    await wait_labels(api, [node], CGPU)
    labels = await node_labels(api, node)
    assert labels["owner"] == "someone", "the hand-made foreign label stays"
    await observed(api, operator, name, node)
    assert await plugin_pod_uids(api, node) == plugin, "labels back to what the plugin saw: no restart"


async def test_conflict_between_two_pools_changes_neither(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(2, prefix="conf", pool_labels={POOL_LABEL: np})
    core = client.CoreV1Api(api)
    await core.patch_node(nodes[1], {"metadata": {"labels": {"gpushare-test/team": np}}})
    a, b = f"a-{np}", f"b-{np}"
    await pools.create(a, np)
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": b},
        "spec": {"nodeSelector": {"matchLabels": {"gpushare-test/team": np}}, "memoryIsolation": False},
    }
    await pools.custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
    pools.created.append(b)
    await wait_labels(api, [nodes[0]], {**CGPU, c.LABEL_POOL: a})
    for me, other in ((a, b), (b, a)):
        cond = await pools.wait_condition(me, "Conflict", "True", "NodesInMultiplePools")
        assert nodes[1] in cond["message"] and other in cond["message"]
    await wait_event(api, a, "ConflictDetected")
    assert managed(await node_labels(api, nodes[1])) == {}, "a conflicting node is changed by neither pool"


async def test_nodes_joining_and_leaving_the_selector(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(2, prefix="move", pool_labels={POOL_LABEL: np})
    (outsider,) = await fake_nodes.create(1, prefix="out", pool_labels={POOL_LABEL: np_id()},
                                          extra_labels={c.LABEL_PLACEMENT: "spread"})  # fmt: skip
    name = f"move-{np}"
    await pools.create(name, np)
    await wait_labels(api, nodes, CGPU)
    assert managed(await node_labels(api, outsider)) == {c.LABEL_PLACEMENT: "spread"}

    core = client.CoreV1Api(api)
    await core.patch_node(outsider, {"metadata": {"labels": {POOL_LABEL: np}}})  # joins
    await wait_labels(api, [outsider], {**CGPU, c.LABEL_POOL: name})
    await core.patch_node(nodes[0], {"metadata": {"labels": {POOL_LABEL: "elsewhere"}}})  # leaves
    await wait_labels(api, [nodes[0]], {c.LABEL_SCHEDULE: "default", c.LABEL_CGPU: None, c.LABEL_POOL: None})
    await core.patch_node(outsider, {"metadata": {"labels": {POOL_LABEL: "elsewhere"}}})  # leaves again
    await wait_labels(
        api, [outsider], {c.LABEL_PLACEMENT: "spread", c.LABEL_SCHEDULE: "default", c.LABEL_POOL: None}
    )
    await pools.wait_condition(name, "Ready", "True")

    async def one_matched() -> dict[str, Any] | None:
        found = await pools.get(name)
        return found if found is not None and found["status"]["nodes"]["matched"] == 1 else None

    # The pool was Ready before the nodes left: its status counts them gone at its next write.
    await wait_for(one_matched, what=f"{name}'s status.nodes.matched == 1 after two nodes left")


async def _restart_states(api: client.ApiClient, nodes: list[str]) -> list[str]:
    out = []
    for n in nodes:
        record = restart_record(await node_obj(api, n))
        out.append(record["state"] if record else "")
    return out


async def _rolled_out_once(
    api: client.ApiClient,
    nodes: list[str],
    before: dict[str, dict[str, str]],
    plugins: PluginPodTracker,
    pool: str,
    op: OperatorProc,
    timeout_s: float = 60,
) -> None:
    """Every label there, foreign labels intact, no node cordoned, every plugin replaced once
    (after ``op``, the operator now in charge, has seen the finished rollout)."""
    await wait_labels(api, nodes, {**CGPU, c.LABEL_POOL: pool}, timeout_s=timeout_s)
    await wait_restarts_done(api, nodes, timeout_s=timeout_s)
    await observed(api, op, pool, nodes[0])
    for n in nodes:
        node = await node_obj(api, n)
        labels = dict(node.metadata.labels or {})
        assert foreign(labels) == foreign(before[n]), f"foreign labels of {n} changed"
        assert not node.spec.unschedulable, f"{n} left cordoned"
        assert c.ANNOTATION_CORDONED_BY not in (node.metadata.annotations or {})
        record = restart_record(node) or {}
        assert record.get("result") == "Restarted", f"{n}: restart recorded as {record}"
        assert len(plugins.uids.get(n, set())) == 2, f"{n}: plugin pods seen {plugins.uids.get(n)}, want 2"


@pytest.mark.parametrize("point", ["created", "pending", "first-done"])
async def test_killed_mid_rollout_resumes_without_duplicate_restarts(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
    point: str,
) -> None:
    """The operator is SIGKILLed at three points of a rollout; a new one finishes it, each plugin
    replaced exactly once, nothing cordoned, no label lost."""
    np = np_id()
    nodes = await fake_nodes.create(3, prefix="kill", pool_labels={POOL_LABEL: np})
    before = {n: await node_labels(api, n) for n in nodes}
    first = start_operator()
    helper = Pools(api)
    name = f"kill-{np}"
    try:
        async with PluginPodTracker(api) as plugins:
            await helper.create(name, np, rollout={"maxUnavailable": 1})

            async def reached() -> bool:
                states = await _restart_states(api, nodes)
                if point == "pending":
                    return "Pending" in states
                return "Done" in states and states.count("Done") < len(nodes)

            if point != "created":
                await wait_for(reached, what=f"rollout at {point}", timeout_s=60, interval=0.05)
            first.kill()
            second = start_operator()
            await _rolled_out_once(api, nodes, before, plugins, name, second)
            await helper.wait_condition(name, "Ready", "True")
        await helper.delete(name)
    finally:
        if await helper.get(name) is not None:
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
    assert second.proc.poll() is None


#: Kopf's peering CRD as shipped in manifests/ (the deployment uses the same file).
PEERING_CRD_FILE = (
    Path(__file__).resolve().parents[2] / "manifests" / "crd" / "kopf.dev_clusterkopfpeerings.yaml"
)


async def _peering(api: client.ApiClient, name: str) -> None:
    await install_crd_files(api, [PEERING_CRD_FILE])
    custom = client.CustomObjectsApi(api)

    async def create() -> bool:
        await custom.create_cluster_custom_object(
            "kopf.dev", "v1", "clusterkopfpeerings",
            {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}},
        )  # fmt: skip
        return True

    await wait_for(create, what=f"ClusterKopfPeering {name} created", timeout_s=30)


async def _peers(api: client.ApiClient, name: str) -> int:
    obj = await client.CustomObjectsApi(api).get_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings", name
    )
    return len(obj.get("status") or {})


async def test_two_replicas_one_reconciles_the_other_takes_over(
    api: client.ApiClient, fake_nodes: FakeNodeSet, start_operator: Callable[..., OperatorProc]
) -> None:
    peering = f"gpushare-{secrets.token_hex(3)}"
    await _peering(api, peering)
    leader = start_operator("--peering", peering, "--priority", "200")

    async def peers(n: int) -> Callable[[], Any]:
        async def check() -> bool:
            return await _peers(api, peering) == n

        return check

    await wait_for(await peers(1), what="the leader registered in the peering", timeout_s=30)
    standby = start_operator("--peering", peering, "--priority", "100")
    await wait_for(await peers(2), what="both replicas registered in the peering", timeout_s=30)

    np_a, np_b = np_id(), np_id()
    a_nodes = await fake_nodes.create(2, prefix="ha-a", pool_labels={POOL_LABEL: np_a})
    b_nodes = await fake_nodes.create(2, prefix="ha-b", pool_labels={POOL_LABEL: np_b})
    helper = Pools(api)
    try:
        await helper.create(f"ha-a-{np_a}", np_a)
        await wait_labels(api, a_nodes, CGPU)
        await wait_restarts_done(api, a_nodes)
        assert leader.sum_metric("gpushare_label_patches_total") == 2
        assert standby.sum_metric("gpushare_label_patches_total") == 0, "the standby replica must not write"

        assert leader.stop() == 0  # graceful: its peering record goes, the standby resumes at once
        await helper.create(f"ha-b-{np_b}", np_b, memoryIsolation=False)
        await wait_labels(api, b_nodes, SHARE, timeout_s=60)
        await wait_restarts_done(api, b_nodes)
        assert standby.sum_metric("gpushare_label_patches_total") == 2
        for name in list(helper.created):
            await helper.delete(name)
    finally:
        for name in helper.created:
            if await helper.get(name) is not None:
                await helper.custom.patch_cluster_custom_object(
                    c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
                )


async def test_leader_handover_mid_rollout_replaces_each_plugin_once(
    api: client.ApiClient, fake_nodes: FakeNodeSet, start_operator: Callable[..., OperatorProc]
) -> None:
    peering = f"gpushare-{secrets.token_hex(3)}"
    await _peering(api, peering)
    leader = start_operator("--peering", peering, "--priority", "200")

    async def registered(n: int) -> bool:
        return await _peers(api, peering) == n

    await wait_for(lambda: registered(1), what="the leader registered in the peering", timeout_s=30)
    standby = start_operator("--peering", peering, "--priority", "100")
    await wait_for(lambda: registered(2), what="both replicas registered", timeout_s=30)

    np = np_id()
    nodes = await fake_nodes.create(3, prefix="hand", pool_labels={POOL_LABEL: np})
    before = {n: await node_labels(api, n) for n in nodes}
    helper = Pools(api)
    name = f"hand-{np}"
    try:
        async with PluginPodTracker(api) as plugins:
            await helper.create(name, np, rollout={"maxUnavailable": 1})

            async def pending() -> bool:
                return "Pending" in await _restart_states(api, nodes)

            await wait_for(pending, what="a restart in progress", timeout_s=60, interval=0.05)
            written = leader.sum_metric("gpushare_label_patches_total")
            assert leader.stop() == 0  # graceful: the standby resumes at once
            await _rolled_out_once(api, nodes, before, plugins, name, standby)
        # Exactly one label patch per node over both replicas.
        assert written + standby.sum_metric("gpushare_label_patches_total") == len(nodes)
        await helper.delete(name)
    finally:
        if await helper.get(name) is not None:
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
    assert standby.proc.poll() is None


async def test_apiserver_killed_mid_rollout_the_operator_resumes(
    cluster: ClusterInfo,
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
) -> None:
    """kube-apiserver SIGKILLed mid-rollout and started again 15 s later (same etcd and port)."""
    dev = DevCluster.of(cluster)
    np = np_id()
    nodes = await fake_nodes.create(3, prefix="apik", pool_labels={POOL_LABEL: np})
    before = {n: await node_labels(api, n) for n in nodes}
    op = start_operator()
    helper = Pools(api)
    name = f"apik-{np}"
    try:
        async with PluginPodTracker(api) as plugins:
            await helper.create(name, np, rollout={"maxUnavailable": 1})

            async def pending() -> bool:
                return "Pending" in await _restart_states(api, nodes)

            await wait_for(pending, what="a restart in progress", timeout_s=60, interval=0.05)
            dev.kill("kube-apiserver")
            await asyncio.sleep(15)
            assert op.proc.poll() is None, "the operator exited while the apiserver was down"
            # From the main thread: a component dies with the thread that started it (PDEATHSIG).
            dev.restart("kube-apiserver")  # returns once /readyz answers
            back = datetime.now(UTC)
            # The rollout needs the plugin pod the DaemonSet controller recreates, and that
            # controller, the scheduler and kwok come back on client-go's reflector backoff (up to
            # 30 s, jittered up to twice that, after a 15 s outage: 27 s and 60 s seen here), which
            # is not the operator's: hence the longer wait.
            await _rolled_out_once(api, nodes, before, plugins, name, op, timeout_s=180)
            await helper.wait_condition(name, "Ready", "True")
        assert op.proc.poll() is None
        # Both of the operator's watches came back (each logs the first answer after failing).
        resumed = {
            e["resource"]: (datetime.fromisoformat(e["timestamp"]) - back).total_seconds()
            for e in op.logs()
            if e.get("event") == "Watch resumed"
        }
        assert set(resumed) == {"nodes", "pods"}, f"watches resumed: {resumed}"
        print(f"operator watches resumed, seconds after the apiserver was ready again: {resumed}")
        assert op.sum_metric("gpushare_label_patches_total") == len(nodes)
        await helper.delete(name)
    finally:
        if await helper.get(name) is not None:
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )


async def test_invalid_pool_is_reported_and_touches_nothing(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    """A pool stored before the CRD rejected selectors on managed labels (an upgrade): InvalidSpec.

    The current CRD refuses such a selector (CEL), so the test stores the pool under a CRD without
    that rule, as an older gpushare would have, then puts the real CRD back.
    """
    np = np_id()
    (node,) = await fake_nodes.create(1, prefix="inv", pool_labels={POOL_LABEL: np})
    name = f"inv-{np}"
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: np, c.LABEL_CGPU: "true"}}},
    }
    ext = client.ApiextensionsV1Api(api)
    path = (
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/nodeSelector"
        "/x-kubernetes-validations"
    )
    crd = await ext.read_custom_resource_definition(c.CRD_NAME)
    rules = crd.spec.versions[0].schema.open_apiv3_schema.properties["spec"].properties["nodeSelector"]
    original = [{"rule": r.rule, "message": r.message} for r in rules.x_kubernetes_validations]
    older = [r for r in original if "gpushare writes itself" not in r["message"]]
    assert len(older) == len(original) - 1
    patch = [{"op": "replace", "path": path, "value": older}]
    await ext.patch_custom_resource_definition(c.CRD_NAME, patch, **JSON_PATCH)
    try:

        async def stored() -> bool:
            try:
                await pools.custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
            except ApiException as exc:
                if exc.status == 422:
                    return False  # the apiserver still validates with the old schema
                raise
            return True

        await wait_for(stored, what="the pool to be stored under the older CRD", timeout_s=30)
    finally:
        restore = [{"op": "replace", "path": path, "value": original}]
        await ext.patch_custom_resource_definition(c.CRD_NAME, restore, **JSON_PATCH)
    pools.created.append(name)
    cond = await pools.wait_condition(name, "Ready", "False", "InvalidSpec")
    assert "nodeSelector must not use labels gpushare writes itself (cgpu)" in cond["message"]
    await pools.wait_condition(name, "Degraded", "True", "InvalidSpec")
    await wait_event(api, name, "InvalidSpec")
    assert managed(await node_labels(api, node)) == {}


async def test_agent_reporting_no_cgpu_module_makes_the_node_isolation_unavailable(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, tmp_path: Path
) -> None:
    """Issue 6: the real agent cycle publishes `absent`; an isolated pool reports IsolationUnavailable."""
    from gpushare.agent import run_cycle
    from gpushare.gpu.fake import FakeGPU, FakeNVML
    from gpushare.gpu.isolation import MODULE_NAME, IsolationPaths

    np = np_id()
    without, with_module = await fake_nodes.create(2, prefix="iso", pool_labels={POOL_LABEL: np})
    for node, modules in ((without, "nvidia 1 0 - Live\n"), (with_module, f"{MODULE_NAME} 1 0 - Live\n")):
        proc = tmp_path / node
        proc.mkdir()
        (proc / "modules").write_text(modules)
        nvml = FakeNVML(gpus=[FakeGPU(name="Tesla T4", memory_mib=15360, uuid=f"GPU-{node}", mig=None)])
        await run_cycle(api, node, nvml, IsolationPaths(proc / "modules", proc / "cgpu_km"))
    assert (await node_labels(api, without))[c.LABEL_CGPU_ISOLATION] == "absent"
    assert (await node_labels(api, with_module))[c.LABEL_CGPU_ISOLATION] == "active"

    name = f"cgpu-{np}"
    await pools.create(name, np)
    await wait_labels(api, [without, with_module], {**CGPU, c.LABEL_POOL: name})
    await wait_restarts_done(api, [without, with_module])
    await pools.wait_condition(name, "Progressing", "False", "RolloutComplete")
    degraded = await pools.wait_condition(name, "Degraded", "True", "IsolationUnavailable")
    assert without in degraded["message"] and with_module not in degraded["message"]
    status = (await pools.get(name) or {})["status"]
    by_node = {s["name"]: s for s in status["nodeStatuses"]}
    assert (by_node[without]["phase"], by_node[without]["reason"]) == ("Degraded", "IsolationUnavailable")
    assert by_node[with_module]["phase"] == "Ready"

    # The module appears (driver reinstalled): the next agent cycle flips the label, the pool recovers.
    proc = tmp_path / without
    (proc / "modules").write_text(f"{MODULE_NAME} 1 0 - Live\n")
    nvml = FakeNVML(gpus=[FakeGPU(name="Tesla T4", memory_mib=15360, uuid=f"GPU-{without}", mig=None)])
    await run_cycle(api, without, nvml, IsolationPaths(proc / "modules", proc / "cgpu_km"))
    await pools.wait_condition(name, "Degraded", "False", "AsExpected")
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady")


# --- issue 16: the device-plugin simulator and the effective mode ------------------------------
# The nodes' GPU resources come from ``pluginsim`` (``create_gpu_nodes(simulate_plugin=True)``): it
# sets them from the labels each time a node's device-plugin pod starts, as ACK's plugin does.

NVIDIA = "nvidia.com/gpu"
GPU_KEYS = (NVIDIA, c.RES_GPU_MEM, c.RES_GPU_COUNT, c.RES_GPU_CORE)


async def gpu_alloc(api: client.ApiClient, node: str) -> dict[str, str]:
    obj = await client.CoreV1Api(api).read_node(node)
    alloc = obj.status.allocatable or {}
    return {k: alloc.get(k, "absent") for k in GPU_KEYS}


async def sim_state(api: client.ApiClient, node: str) -> dict[str, Any]:
    obj = await client.CoreV1Api(api).read_node(node)
    raw = (obj.metadata.annotations or {}).get(ANNOTATION_STATE)
    return json.loads(raw) if raw else {}


async def delete_plugin_pods(api: client.ApiClient, node: str) -> None:
    core = client.CoreV1Api(api)
    for pod in await plugin_pods_on(api, node):
        await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)


def alloc_of(gpus: int, mem_per_gpu: int, mode: str) -> dict[str, str]:
    mem = str(gpus * mem_per_gpu) if mode != "default" else "0"
    return {
        NVIDIA: str(gpus) if mode == "default" else "0",
        c.RES_GPU_MEM: mem,
        c.RES_GPU_COUNT: "0" if mode == "default" else str(gpus),
        c.RES_GPU_CORE: str(100 * gpus) if mode == "core_mem" else "0",
    }


async def wait_alloc(
    api: client.ApiClient, nodes: list[str], want: dict[str, str], timeout_s: float = 60
) -> None:
    async def check() -> bool:
        return all([await gpu_alloc(api, n) == want for n in nodes])

    await wait_for(check, what=f"{nodes} to advertise {want}", timeout_s=timeout_s)


def core_job_pod(name: str, nodepool: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {POOL_LABEL: nodepool},
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.invalid/cuda-sample:fake",
                    "resources": {"limits": {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}},
                }
            ],
        },
    }


async def node_statuses(pools: Pools, name: str) -> dict[str, dict[str, Any]]:
    obj = await pools.get(name) or {}
    return {s["name"]: s for s in (obj.get("status") or {}).get("nodeStatuses") or []}


# --- the simulator alone ---------------------------------------------------------------------


async def test_simulated_plugin_advertises_the_labels_it_saw_at_start_and_survives_kwok(
    api: client.ApiClient, fake_nodes: FakeNodeSet
) -> None:
    from gpushare.gpu.fake import FakeGPU

    np = np_id()
    (node,) = await fake_nodes.create(
        1, prefix="sim", pool_labels={POOL_LABEL: np}, simulate_plugin=True,
        gpus=[FakeGPU(name="Tesla V100-SXM2-16GB", memory_mib=16160)] * 2,
    )  # fmt: skip
    # No schedule label: ACK's default (exclusive) mode.
    assert await gpu_alloc(api, node) == alloc_of(2, 15, "default")
    first = await sim_state(api, node)
    assert first["mode"] == "default" and first["pod"] in await plugin_pod_uids(api, node)

    # Labels alone change nothing: the plugin read them when it started.
    core = client.CoreV1Api(api)
    await core.patch_node(
        node, {"metadata": {"labels": {c.LABEL_SCHEDULE: "cgpu", c.LABEL_DISABLE_ISOLATION: "true"}}}
    )
    await asyncio.sleep(3)
    assert await gpu_alloc(api, node) == alloc_of(2, 15, "default")
    assert (await sim_state(api, node))["pod"] == first["pod"]

    # A new plugin pod reads them: 2 x floor(16160 MiB / 1024) = 30 GiB, gpu-count 2.
    await delete_plugin_pods(api, node)
    await wait_plugin_registered(api, [node], other_than={node: first["pod"]})
    assert await gpu_alloc(api, node) == alloc_of(2, 15, "cgpu")
    state = await sim_state(api, node)
    assert (state["mode"], state["isolation"]) == ("cgpu", "disabled")

    # kwok owns the node's heartbeats; it must keep the resources the plugin set.
    obj = await core.read_node(node)
    beat = max(cond.last_heartbeat_time for cond in obj.status.conditions)

    async def heartbeat() -> bool:
        now = await core.read_node(node)
        return max(cond.last_heartbeat_time for cond in now.status.conditions) > beat

    await wait_for(heartbeat, what=f"a kwok heartbeat on {node}", timeout_s=90, interval=1)
    assert await gpu_alloc(api, node) == alloc_of(2, 15, "cgpu")
    obj = await core.read_node(node)
    assert obj.status.capacity[c.RES_GPU_MEM] == "30"


# --- the operator confirms the effective mode ------------------------------------------------


async def test_switch_to_core_mem_with_rolling_restarts_and_a_pending_core_job_schedules(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools, namespace: str
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(2, prefix="roll", pool_labels={POOL_LABEL: np}, simulate_plugin=True,
                                    gpus_per_node=1, gpu_mem_gib_per_gpu=16)  # fmt: skip
    name = f"core-{np}"
    await pools.create(name, np)
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady")
    await wait_alloc(api, nodes, alloc_of(1, 16, "cgpu"), timeout_s=5)  # Ready implies it

    core = client.CoreV1Api(api)
    await core.create_namespaced_pod(namespace, cast(Any, core_job_pod("core-job", np)))

    async def unschedulable() -> bool:
        pod = await core.read_namespaced_pod("core-job", namespace)
        conds = {x.type: x for x in pod.status.conditions or []}
        sched = conds.get("PodScheduled")
        return sched is not None and sched.reason == "Unschedulable" and not pod.spec.node_name

    await wait_for(unschedulable, what="the core job to be Unschedulable on cgpu nodes", timeout_s=30)

    await pools.patch_spec(name, {"computeAllocation": True})
    generation = (await pools.get(name) or {})["metadata"]["generation"]

    async def ready_for_this_generation() -> bool:
        cond = await pools.condition(name, "Ready")
        return bool(cond and cond["status"] == "True" and cond.get("observedGeneration") == generation)

    await wait_for(ready_for_this_generation, what=f"{name} Ready for generation {generation}", timeout_s=90)
    # The pool claims Ready only once every node advertises core_mem resources.
    for n in nodes:
        assert await gpu_alloc(api, n) == alloc_of(1, 16, "core_mem"), n
        assert (await sim_state(api, n))["mode"] == "core_mem"

    async def scheduled() -> str | None:
        pod = await core.read_namespaced_pod("core-job", namespace)
        return pod.spec.node_name if pod.status.phase == "Running" else None

    where = await wait_for(scheduled, what="kube-scheduler to place the core job", timeout_s=60)
    assert where in nodes


async def test_switch_with_restart_never_leaves_nodes_stale_and_the_pool_names_them(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(2, prefix="never", pool_labels={POOL_LABEL: np}, simulate_plugin=True)
    name = f"never-{np}"
    await pools.create(name, np)
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady")
    plugins = {n: await plugin_pod_uids(api, n) for n in nodes}

    await pools.patch_spec(name, {"computeAllocation": True, "devicePlugin": {"restart": "Never"}})
    await wait_labels(api, nodes, {c.LABEL_SCHEDULE: "core_mem"})

    async def both_named() -> dict[str, Any] | None:
        # The status is written at most once a second while nodes move: the first Degraded may
        # name only the node labelled first.
        cond = await pools.condition(name, "Degraded")
        if cond and (cond["status"], cond["reason"]) == ("True", "PluginRestartNeeded"):
            return cond if all(n in cond["message"] for n in nodes) else None
        return None

    await wait_for(both_named, what=f"{name} Degraded (PluginRestartNeeded) naming {nodes}", timeout_s=60)
    ready = await pools.condition(name, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert all(n in ready["message"] for n in nodes), ready
    statuses = await node_statuses(pools, name)
    for n in nodes:
        assert (statuses[n]["phase"], statuses[n]["reason"]) == ("Degraded", "PluginRestartNeeded")
        assert "node advertises cgpu/share resources" in statuses[n]["message"]
        assert await plugin_pod_uids(api, n) == plugins[n], "restart Never: the plugin is left alone"
        assert await gpu_alloc(api, n) == alloc_of(1, 16, "cgpu"), "stale: still the old mode's resources"

    # The administrator restarts one plugin by hand: that node is Ready, the pool still names the other.
    await delete_plugin_pods(api, nodes[0])
    await wait_alloc(api, nodes[:1], alloc_of(1, 16, "core_mem"))

    async def only_second_left() -> bool:
        cond = await pools.condition(name, "Degraded")
        return bool(cond and nodes[1] in cond["message"] and nodes[0] not in cond["message"])

    await wait_for(only_second_left, what=f"{name} to name only {nodes[1]}", timeout_s=30)
    assert (await node_statuses(pools, name)).get(nodes[0], {"phase": "Ready"})["phase"] == "Ready"
    assert (await pools.condition(name, "Ready") or {})["status"] == "False"

    # Back to restart: Rolling: the operator does the restarts it skipped (it cannot tell that the
    # first node's plugin was restarted by hand, so that one restarts once more), and the pool is Ready.
    await pools.patch_spec(name, {"devicePlugin": {"restart": "Rolling"}})
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady", timeout_s=60)
    for n in nodes:
        assert await gpu_alloc(api, n) == alloc_of(1, 16, "core_mem")
    assert not (await plugin_pod_uids(api, nodes[1]) & plugins[nodes[1]]), "the skipped restart is done"


async def test_restore_brings_back_what_the_nodes_advertised_before(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    nodes = await fake_nodes.create(2, prefix="rest", pool_labels={POOL_LABEL: np}, simulate_plugin=True,
                                    gpus_per_node=2, gpu_mem_gib_per_gpu=24)  # fmt: skip
    before = {n: await gpu_alloc(api, n) for n in nodes}
    assert all(b == alloc_of(2, 24, "default") for b in before.values())
    name = f"rest-{np}"
    await pools.create(name, np, computeAllocation=True)
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady")
    for n in nodes:
        assert await gpu_alloc(api, n) == alloc_of(2, 24, "core_mem")
    plugins = {n: (await sim_state(api, n))["pod"] for n in nodes}

    await pools.delete(name)
    # Restore writes schedule=default and restarts the plugins; the new ones advertise whole GPUs again.
    await wait_plugin_registered(api, nodes, other_than=plugins)
    for n in nodes:
        assert await gpu_alloc(api, n) == before[n]
        assert (await sim_state(api, n))["mode"] == "default"
        # Nothing gpushare wrote for the pool stays (the finalizer went once the restarts were done).
        annotations = (await node_obj(api, n)).metadata.annotations or {}
        left = {k: v for k, v in annotations.items() if k in POOL_ANNOTATIONS}
        assert left == {}, f"{n} keeps {left} after the pool was deleted with cleanup Restore"
        assert managed(await node_labels(api, n)) == {c.LABEL_SCHEDULE: "default"}


async def test_a_plugin_that_never_registers_is_reported_after_ready_timeout(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np = np_id()
    good, hung = await fake_nodes.create(2, prefix="hang", pool_labels={POOL_LABEL: np}, simulate_plugin=True)
    # From now on the plugin pods on `hung` run (Ready) but never register their resources.
    await client.CoreV1Api(api).patch_node(hung, {"metadata": {"annotations": {ANNOTATION_HANG: "true"}}})
    name = f"hang-{np}"
    await pools.create(name, np, devicePlugin={"readyTimeoutSeconds": 10})

    async def pending_then() -> bool:
        return (await node_statuses(pools, name)).get(hung, {}).get("reason") == "PluginModePending"

    await wait_for(pending_then, what=f"{hung} waiting for its plugin (PluginModePending)", timeout_s=30)
    progressing = await pools.condition(name, "Progressing")
    assert progressing is not None and progressing["status"] == "True"

    degraded = await pools.wait_condition(name, "Degraded", "True", "PluginModeStale", timeout_s=60)
    assert f"{hung}: node advertises exclusive-mode resources" in degraded["message"]
    assert "after switching to cgpu; the device plugin has not picked up the labels" in degraded["message"]
    statuses = await node_statuses(pools, name)
    assert (statuses[hung]["phase"], statuses[hung]["reason"]) == ("Degraded", "PluginModeStale")
    assert statuses.get(good, {"phase": "Ready"})["phase"] == "Ready"
    assert (await pools.condition(name, "Ready") or {})["status"] == "False"
    assert await gpu_alloc(api, good) == alloc_of(1, 16, "cgpu")


class UnavailableTracker:
    """Watches the nodes of a node pool and records the most that were unavailable at once:
    restarting (record Pending) or not advertising the mode of their labels (policy.plugin_mode)."""

    def __init__(self, api: client.ApiClient, nodepool: str) -> None:
        self.api = api
        self.nodepool = nodepool
        self.now: set[str] = set()
        self.most: set[str] = set()
        self.ever: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def _seen(self, node: Any) -> None:
        from gpushare.backends.ack.evidence import advertises

        record = restart_record(node)
        labels = node.metadata.labels or {}
        mode = labels.get(c.LABEL_SCHEDULE) or c.SCHEDULE_DEFAULT
        alloc = {str(k): str(v) for k, v in (node.status.allocatable or {}).items()}
        name = node.metadata.name
        if (record is not None and record["state"] == "Pending") or not advertises(mode, alloc):
            self.now.add(name)
            self.ever.add(name)
        else:
            self.now.discard(name)
        if len(self.now) > len(self.most):
            self.most = set(self.now)

    async def _run(self, since: str) -> None:
        core = client.CoreV1Api(self.api)
        w = watch.Watch()
        selector = f"{POOL_LABEL}={self.nodepool}"
        async with w.stream(core.list_node, label_selector=selector, resource_version=since) as stream:
            async for event in stream:
                self._seen(event["object"])

    async def __aenter__(self) -> UnavailableTracker:
        # The nodes as they are now, listed before this returns; the watch goes on from that list.
        nodes = await client.CoreV1Api(self.api).list_node(label_selector=f"{POOL_LABEL}={self.nodepool}")
        for node in nodes.items:
            self._seen(node)
        self.most, self.ever = set(self.now), set(self.now)
        self._task = asyncio.create_task(self._run(str(nodes.metadata.resource_version)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_the_rollout_waits_for_each_node_to_advertise_and_stops_at_one_that_never_does(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    """maxUnavailable 1, cgpu -> core_mem: a node counts until it advertises core_mem resources,
    not until its new plugin pod is Ready. The first node's plugin never registers: the rollout
    stops there (RolloutStalled) and starts again once that plugin comes back."""
    np = np_id()
    created = await fake_nodes.create(3, prefix="stall", pool_labels={POOL_LABEL: np}, simulate_plugin=True,
                                      gpus_per_node=1, gpu_mem_gib_per_gpu=16)  # fmt: skip
    nodes = sorted(created)
    first, rest = nodes[0], nodes[1:]
    name = f"stall-{np}"
    await pools.create(name, np, devicePlugin={"readyTimeoutSeconds": 10}, rollout={"maxUnavailable": 1})
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady", timeout_s=90)
    core = client.CoreV1Api(api)
    await core.patch_node(first, {"metadata": {"annotations": {ANNOTATION_HANG: "true"}}})
    records = {n: restart_record(await node_obj(api, n)) for n in rest}

    async with UnavailableTracker(api, np) as tracker:
        await pools.patch_spec(name, {"computeAllocation": True})
        generation = (await pools.get(name) or {})["metadata"]["generation"]
        stalled = await pools.wait_condition(name, "Progressing", "True", "RolloutStalled", timeout_s=90)
        assert f"rollout.maxUnavailable is used up by {first}" in stalled["message"], stalled
        assert "label the node gpushare.io/skip=true" in stalled["message"]
        await observed(api, operator, name, first)
        statuses = await node_statuses(pools, name)
        assert (statuses[first]["phase"], statuses[first]["reason"]) == ("Degraded", "PluginModeStale")
        for n in rest:  # never touched while the first node does not advertise core_mem
            assert managed(await node_labels(api, n))[c.LABEL_SCHEDULE] == "cgpu", n
            assert restart_record(await node_obj(api, n)) == records[n], n
            assert await gpu_alloc(api, n) == alloc_of(1, 16, "cgpu"), n

        # The plugin comes back (a new pod that registers): the rollout goes on, one node at a time.
        await core.patch_node(first, {"metadata": {"annotations": {ANNOTATION_HANG: None}}}, **MERGE)
        await delete_plugin_pods(api, first)

        async def ready_for_this_generation() -> bool:
            cond = await pools.condition(name, "Ready")
            return bool(cond and cond["status"] == "True" and cond.get("observedGeneration") == generation)

        await wait_for(
            ready_for_this_generation, what=f"{name} Ready for generation {generation}", timeout_s=120
        )
    for n in nodes:
        assert await gpu_alloc(api, n) == alloc_of(1, 16, "core_mem"), n
    assert tracker.ever == set(nodes), "every node was restarted"
    assert len(tracker.most) == 1, f"{sorted(tracker.most)} unavailable at once with maxUnavailable 1"


async def test_kubectl_shows_the_pool_in_plain_words(
    cluster: ClusterInfo, api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    """`kubectl describe gsp` and `kubectl get gsp` as a user reads them (issue 24, point 7): resource
    names rather than "Gpu Mem Gi B", no empty Message on Ready nodes, "Mode" only for the
    admission mode, columns that do not repeat each other."""
    import shutil
    import subprocess

    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed (the integration tests need it on PATH)"
    np = np_id()
    await fake_nodes.create(2, prefix="desc", pool_labels={POOL_LABEL: np}, gpus_per_node=2)
    name = f"desc-{np}"
    await pools.create(name, np)
    await pools.wait_condition(name, "Ready", "True", "AllNodesReady")

    def run(*args: str) -> str:
        env = {
            "PATH": "/usr/bin:/bin",
            "KUBECONFIG": str(cluster.kubeconfig),
            "HOME": str(cluster.kubeconfig.parent),
        }
        proc = subprocess.run(
            [kubectl, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    described = await asyncio.to_thread(run, "describe", "gsp", name)
    assert "Gpu Mem" not in described and " Gi B" not in described, described
    for resource in (c.RES_GPU_COUNT, c.RES_GPU_MEM):
        assert f"{resource}:" in described, described
    words = [line.split() for line in described.splitlines()]
    assert ["Message:"] not in words, f"an empty Message field:\n{described}"
    assert ["Schedule:", "cgpu"] in words, described
    assert [w for w in words if w and w[0] == "Mode:"] == [["Mode:", "Enforce"]], described

    table = (await asyncio.to_thread(run, "get", "gsp", name)).splitlines()
    assert table[0].split() == ["NAME", "SCHEDULE", "BACKEND", "NODES", "READY", "STATUS", "AGE"], table
    assert table[1].split()[:6] == [name, "cgpu", "ack", "2", "2", "AllNodesReady"], table


async def test_an_upgraded_operator_deletes_the_status_keys_of_the_old_one(
    api: client.ApiClient, fake_nodes: FakeNodeSet, start_operator: Callable[..., OperatorProc]
) -> None:
    """The status an older gpushare wrote (capacity gpus/gpuMemGiB) is left by a JSON merge patch
    unless it names those keys: the next operator deletes them on its first write."""
    np = np_id()
    await fake_nodes.create(1, prefix="stale", pool_labels={POOL_LABEL: np}, gpus_per_node=2)
    first = start_operator()
    helper = Pools(api)
    name = f"stale-{np}"
    try:
        await helper.create(name, np)
        await helper.wait_condition(name, "Ready", "True", "AllNodesReady")
        first.stop()
        # What the old status left (string values: the new schema takes no integers there).
        await helper.custom.patch_cluster_custom_object_status(
            c.GROUP, c.VERSION, c.PLURAL, name,
            {"status": {"capacity": {"gpus": "2", "gpuMemGiB": "30"}}}, **MERGE,
        )  # fmt: skip
        stale = ((await helper.get(name)) or {})["status"]["capacity"]
        assert {"gpus", "gpuMemGiB", c.RES_GPU_MEM} <= set(stale), stale
        start_operator()

        async def cleaned() -> dict[str, Any] | None:
            capacity = dict(((await helper.get(name)) or {}).get("status", {}).get("capacity") or {})
            return capacity if set(capacity) == {c.RES_GPU_COUNT, c.RES_GPU_MEM} else None

        capacity = await wait_for(cleaned, what=f"{name}'s capacity without gpus/gpuMemGiB", timeout_s=60)
        assert capacity[c.RES_GPU_COUNT] == "2"
        await helper.delete(name)
    finally:
        if await helper.get(name) is not None:
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
