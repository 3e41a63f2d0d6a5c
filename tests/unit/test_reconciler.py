"""Reconciler passes over an in-memory API that records writes, with a node index that lags.

A real apiserver cannot be made to deliver watch events late on purpose; this stand-in can,
which is exactly the case that matters: the operator must never repeat a write (or a plugin
restart) because its index has not seen its own previous write yet.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter

from gpushare import constants as c
from gpushare import metrics
from gpushare.devcluster import migsim
from gpushare.handlers import pools as pools_handlers
from gpushare.handlers.state import OperatorState, Started
from gpushare.k8s import Conflict
from gpushare.policy import NodeView, PodView
from gpushare.policy.restart import PLUGIN_RECREATE_GRACE
from gpushare.policy.views import PluginPod
from gpushare.reconcile import PassResult, Reconciler, pod_key
from gpushare.reconcile.loop import pool_loop

NP = "alibabacloud.com/nodepool-id"
T0 = datetime(2026, 11, 29, 12, 0, 0, 300000, tzinfo=UTC)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            _merge(target.setdefault(key, {}), value)
        else:
            target[key] = value


class FakeCluster:
    """The operator's API surface (``ClusterAPI``, which gpushare.k8s.cluster.Cluster implements) over a
    dict of nodes; mypy checks it against the Protocol wherever it is handed to ``Reconciler``."""

    def __init__(self, nodes: list[str]) -> None:
        self.rv = 100
        self.nodes: dict[str, dict[str, Any]] = {}
        for name in nodes:
            self.rv += 1
            self.nodes[name] = {
                "metadata": {"name": name, "labels": {NP: "a"}, "resourceVersion": str(self.rv)},
                # what the device plugin advertises in the pool's mode (cgpu), 1 GPU
                "status": {"allocatable": {c.RES_GPU_MEM: "16", c.RES_GPU_COUNT: "1"}},
            }
        self.writes: list[tuple[str, str, Any]] = []
        self.plugin: dict[str, list[PluginPod]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}

    def views(self) -> list[NodeView]:
        return [NodeView.from_obj(copy.deepcopy(obj)) for obj in self.nodes.values()]

    async def read_node(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.nodes.get(name))

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        obj = self.nodes[name]
        patch = copy.deepcopy(patch)
        wanted = patch.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            self.writes.append(("conflict", name, patch))
            raise Conflict("HTTP 409 Conflict")
        self.writes.append(("patch", name, patch))
        self.rv += 1
        _merge(obj, patch)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    async def pods_on_node(self, node: str) -> list[PodView]:
        return []

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.configmaps.get((namespace, name)))

    async def patch_configmap(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        obj = self.configmaps.get((namespace, name))
        if obj is None:
            return None
        patch = copy.deepcopy(patch)
        wanted = patch.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            raise Conflict("HTTP 409 Conflict")
        self.writes.append(("configmap", name, patch))
        self.rv += 1
        _merge(obj, patch)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    async def plugin_pods(
        self, namespace: str, label_selector: str, node: str | None = None
    ) -> list[PluginPod]:
        if node is None:
            return [p for pods in self.plugin.values() for p in pods]
        return list(self.plugin.get(node, []))

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        self.writes.append(("delete", name, uid))
        for node, pods in self.plugin.items():
            self.plugin[node] = [p for p in pods if p.uid != uid]
        return True

    async def evict_pod(self, namespace: str, name: str) -> str:
        self.writes.append(("evict", name, None))
        return "evicted"

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        self.writes.append(("status", name, status))
        return True

    async def event(
        self, obj: Mapping[str, str], *, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        self.writes.append(("event", reason, message))


POOL: dict[str, Any] = {
    "apiVersion": c.API_VERSION,
    "kind": c.KIND,
    "metadata": {"name": "gpu", "generation": 1, "uid": "u1"},
    "spec": {"nodeSelector": {"matchLabels": {NP: "a"}}, "rollout": {"maxUnavailable": "100%"}},
}


async def _pass(
    rec: Reconciler,
    name: str,
    *,
    pools: Iterable[Mapping[str, Any]],
    nodes: Iterable[NodeView],
    pods: Iterable[PodView],
) -> PassResult:
    """What production does: the watches deliver whole lists (as after a new list: what is not in
    them is gone), the pool loop hands over the pools, then one pass."""
    nodes, pods = list(nodes), list(pods)
    rec.set_pools(pools)
    for view in nodes:
        rec.observe_node(view)
    rec.nodes_listed({v.name for v in nodes})
    for pod in pods:
        rec.observe_pod(pod)
    rec.pods_listed({pod_key(p) for p in pods})
    return await rec.run_pass(name)


def _node_writes(fake: FakeCluster) -> list[tuple[str, str, Any]]:
    return [w for w in fake.writes if w[0] in ("patch", "delete")]


def _plugin_views(fake: FakeCluster) -> list[PodView]:
    """The fake's plugin pods as the pod watch delivers them (default device plugin labels)."""
    return [
        PodView(
            namespace=p.namespace,
            name=p.name,
            uid=p.uid,
            node_name=p.node,
            phase="Running",
            deletion=p.deleting,
            labels=dict(c.DEFAULT_PLUGIN_LABELS),
            created=p.created.strftime("%Y-%m-%dT%H:%M:%SZ") if p.created else "",
            ready=p.ready,
        )
        for pods in fake.plugin.values()
        for p in pods
    ]


@pytest.mark.parametrize("watched", [True, False], ids=["default-plugin-watched", "custom-plugin-listed"])
async def test_a_lagging_index_never_repeats_writes_or_restarts(watched: bool) -> None:
    fake = FakeCluster(["n0", "n1", "n2"])
    for i, node in enumerate(fake.nodes):
        fake.plugin[node] = [
            PluginPod(node, "kube-system", f"dp-{i}", f"uid-{i}", T0 - timedelta(hours=1), True, False)
        ]
    pool = POOL
    if not watched:  # a plugin the pod watch does not cover: its pods are listed through the API
        spec = {**POOL["spec"], "devicePlugin": {"podSelector": {"matchLabels": {"app": "my-dp"}}}}
        pool = {**POOL, "spec": spec}

    def pods() -> list[PodView]:
        return _plugin_views(fake) if watched else []

    clock = [T0]
    rec = Reconciler(fake, clock=lambda: clock[0])
    stale = fake.views()  # the index never sees any of our writes in this test

    first = await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=pods())
    assert [w[1] for w in _node_writes(fake)] == ["n0", "n1", "n2"]
    assert first.requeue == 1.0 and not first.done

    # Before `since` (the next full second): nothing to do, nothing written.
    fake.writes.clear()
    await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=pods())
    assert _node_writes(fake) == []

    # After `since`: the old plugin pods are deleted once; the DaemonSet's replacements get Ready.
    clock[0] = T0 + timedelta(seconds=2)
    old_pods = pods()
    await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=old_pods)
    assert sorted(w[1] for w in _node_writes(fake) if w[0] == "delete") == ["dp-0", "dp-1", "dp-2"]
    # The pod watch has not seen the deletions yet: nothing is deleted twice.
    fake.writes.clear()
    await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=old_pods)
    assert _node_writes(fake) == []
    for i, node in enumerate(fake.nodes):
        fake.plugin[node] = [PluginPod(node, "kube-system", f"dp-new-{i}", f"new-{i}", clock[0], True, False)]
    fake.writes.clear()
    done = await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=pods())
    writes = _node_writes(fake)
    assert [w[0] for w in writes] == ["patch"] * 3  # the Done records, nothing else
    assert all(
        '"state":"Done"' in w[2]["metadata"]["annotations"][c.ANNOTATION_PLUGIN_RESTART] for w in writes
    )
    assert done.done

    # Still stale, much later: zero writes of any kind.
    fake.writes.clear()
    clock[0] = T0 + timedelta(minutes=5)
    quiet = await _pass(rec, "gpu", pools=[pool], nodes=stale, pods=pods())
    assert fake.writes == []
    assert quiet.done and quiet.requeue == 60.0


def _restart_results(fake: FakeCluster) -> dict[str, str]:
    out = {}
    for name, obj in fake.nodes.items():
        raw = obj["metadata"].get("annotations", {}).get(c.ANNOTATION_PLUGIN_RESTART)
        record = json.loads(raw) if raw else {}
        out[name] = f"{record.get('state')}/{record.get('result', '')}"
    return out


async def test_a_node_without_a_plugin_pod_is_done_at_once_for_the_replica_that_labelled_it() -> None:
    fake = FakeCluster(["n0"])
    clock = [T0]
    rec = Reconciler(fake, clock=lambda: clock[0])
    await _pass(rec, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    assert _restart_results(fake) == {"n0": "Pending/"}
    clock[0] = T0 + timedelta(seconds=2)
    done = await _pass(rec, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    assert _restart_results(fake) == {"n0": "Done/NoDevicePluginPod"}
    assert done.done


@pytest.mark.parametrize("recreated", [True, False], ids=["daemonset-recreates", "never-recreated"])
async def test_a_replica_taking_over_waits_for_the_plugin_its_predecessor_deleted(recreated: bool) -> None:
    """Leader handover right after the old leader deleted the plugin pod: the node has no plugin
    pod for a moment. The new leader must not record "no device plugin pod" while the DaemonSet
    is about to create the new one (found by the leader-handover test on the real control plane)."""
    fake = FakeCluster(["n0"])
    fake.plugin["n0"] = [
        PluginPod("n0", "kube-system", "dp-0", "uid-0", T0 - timedelta(hours=1), True, False)
    ]
    clock = [T0]
    old = Reconciler(fake, clock=lambda: clock[0])
    await _pass(old, "gpu", pools=[POOL], nodes=fake.views(), pods=_plugin_views(fake))
    clock[0] = T0 + timedelta(seconds=2)
    await _pass(old, "gpu", pools=[POOL], nodes=fake.views(), pods=_plugin_views(fake))
    assert ("delete", "dp-0", "uid-0") in fake.writes and fake.plugin["n0"] == []
    # The old leader stops here. The new one starts with the pod gone and the restart still owed.
    clock[0] = T0 + timedelta(seconds=3)
    new = Reconciler(fake, clock=lambda: clock[0])
    fake.writes.clear()
    waiting = await _pass(new, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    assert _node_writes(fake) == [] and not waiting.done
    assert _restart_results(fake) == {"n0": "Pending/"}
    clock[0] = T0 + timedelta(seconds=13)
    if recreated:
        fake.plugin["n0"] = [PluginPod("n0", "kube-system", "dp-1", "uid-1", clock[0], True, False)]
        done = await _pass(new, "gpu", pools=[POOL], nodes=fake.views(), pods=_plugin_views(fake))
        assert _restart_results(fake) == {"n0": "Done/Restarted"}
    else:
        await _pass(new, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
        assert _restart_results(fake) == {"n0": "Pending/"}, "still within the grace"
        clock[0] = T0 + timedelta(seconds=3) + PLUGIN_RECREATE_GRACE
        done = await _pass(new, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
        assert _restart_results(fake) == {"n0": "Done/NoDevicePluginPod"}
    assert done.done
    assert [w for w in fake.writes if w[0] == "delete"] == [], "nothing deleted twice"


async def test_index_newer_than_own_write_wins() -> None:
    fake = FakeCluster(["n0"])
    rec = Reconciler(fake, clock=lambda: T0)
    await _pass(rec, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    # Someone edits a managed label after our write; the index shows it (newer resourceVersion).
    await fake.patch_node("n0", {"metadata": {"labels": {c.LABEL_SCHEDULE: "share"}}})
    fake.writes.clear()
    await _pass(rec, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    patches = [w for w in fake.writes if w[0] == "patch"]
    assert [p[2]["metadata"]["labels"] for p in patches] == [{c.LABEL_SCHEDULE: "cgpu"}]
    assert ("event", "DriftCorrected") in [(w[0], w[1]) for w in fake.writes]


async def test_a_patch_planned_from_a_stale_view_is_refused_and_planned_again() -> None:
    fake = FakeCluster(["n0"])
    stale = fake.views()
    # Someone labels the node after the index last saw it (the index lags).
    await fake.patch_node("n0", {"metadata": {"labels": {c.LABEL_PLACEMENT: "spread"}}})
    fake.writes.clear()
    rec = Reconciler(fake, clock=lambda: T0)
    first = await _pass(rec, "gpu", pools=[POOL], nodes=stale, pods=[])
    # Refused, read back, planned again from the real node and sent once more.
    assert [w[0] for w in fake.writes if w[0] in ("patch", "conflict")] == ["conflict", "patch"]
    assert first.conflicts == 0
    patch = next(w[2] for w in fake.writes if w[0] == "patch")
    assert patch["metadata"]["labels"][c.LABEL_PLACEMENT] == "binpack"
    owned = json.loads(patch["metadata"]["annotations"][c.ANNOTATION_OWNED])
    assert owned["prior"][c.LABEL_PLACEMENT] == "spread", "the prior comes from the node, not the stale view"
    # Nothing more to do while the index still lags.
    fake.writes.clear()
    await _pass(rec, "gpu", pools=[POOL], nodes=stale, pods=[])
    assert [w for w in fake.writes if w[0] in ("patch", "conflict")] == []


async def test_nothing_is_sent_when_a_stale_view_needs_nothing() -> None:
    fake = FakeCluster(["n0"])
    never = {**POOL, "spec": {**POOL["spec"], "devicePlugin": {"restart": "Never"}}}
    rec = Reconciler(fake, clock=lambda: T0)
    await _pass(rec, "gpu", pools=[never], nodes=fake.views(), pods=[])
    stale = fake.views()
    await fake.patch_node("n0", {"metadata": {"labels": {c.LABEL_POOL: "x"}}})  # not plugin-relevant
    await fake.patch_node("n0", {"metadata": {"labels": {c.LABEL_POOL: "gpu"}}})
    fake.writes.clear()
    # Same labels as the stale view, newer version: the plan is a Noop, so nothing is sent.
    await _pass(rec, "gpu", pools=[never], nodes=stale, pods=[])
    assert [w[0] for w in fake.writes if w[0] in ("patch", "conflict")] == []


async def test_a_node_waiting_for_its_plugin_mode_is_looked_at_again_before_the_timeout() -> None:
    fake = FakeCluster(["n0"])
    for obj in fake.nodes.values():
        obj["status"] = {"allocatable": {"nvidia.com/gpu": "1"}}  # still in exclusive mode
    short = {**POOL, "spec": {**POOL["spec"], "devicePlugin": {"readyTimeoutSeconds": 10}}}
    clock = [T0]
    rec = Reconciler(fake, clock=lambda: clock[0])
    await _pass(rec, "gpu", pools=[short], nodes=fake.views(), pods=[])
    clock[0] = T0 + timedelta(seconds=2)  # no plugin pod: the restart is Done at once
    result = await _pass(rec, "gpu", pools=[short], nodes=fake.views(), pods=[])
    status = [w[2] for w in fake.writes if w[0] == "status"][-1]
    assert [(s["name"], s["reason"]) for s in status["nodeStatuses"]] == [("n0", "PluginModePending")]
    assert result.requeue == 5.0, "looked at again well before readyTimeoutSeconds"
    clock[0] = T0 + timedelta(seconds=20)
    result = await _pass(rec, "gpu", pools=[short], nodes=fake.views(), pods=[])
    status = [w[2] for w in fake.writes if w[0] == "status"][-1]
    assert [(s["name"], s["reason"]) for s in status["nodeStatuses"]] == [("n0", "PluginModeStale")]
    assert result.requeue == 60.0


def _pool(name: str, np: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "generation": 1, "uid": f"u-{name}"},
        "spec": {"nodeSelector": {"matchLabels": {NP: np}}, "devicePlugin": {"restart": "Never"}, **spec},
    }


async def test_own_echo_plans_nothing_and_a_change_wakes_only_the_pools_it_concerns() -> None:
    fake = FakeCluster(["a0", "a1", "b0"])
    fake.nodes["b0"]["metadata"]["labels"][NP] = "b"
    pools = [_pool("pa", "a"), _pool("pb", "b")]
    rec = Reconciler(fake, clock=lambda: T0)
    wake_a, wake_b = rec.wakeup("pa"), rec.wakeup("pb")
    await _pass(rec, "pa", pools=pools, nodes=fake.views(), pods=[])
    await rec.run_pass("pb")
    assert {w[1] for w in fake.writes if w[0] == "patch"} == {"a0", "a1", "b0"}
    wake_a.clear()
    wake_b.clear()
    # The watch delivers our own writes: nothing is dirty, nobody is woken.
    for view in fake.views():
        rec.observe_node(NodeView.project(fake.nodes[view.name]))
    assert rec.dirty == set()
    assert not wake_a.is_set() and not wake_b.is_set()
    # Someone edits b0: only pool pb is woken, and its pass plans b0 alone.
    await fake.patch_node("b0", {"metadata": {"labels": {c.LABEL_PLACEMENT: "spread"}}})
    rec.observe_node(NodeView.project(fake.nodes["b0"]))
    assert wake_b.is_set() and not wake_a.is_set()
    before = metrics.PLANNED_NODES._value.get()
    fake.writes.clear()
    await rec.run_pass("pb")
    assert metrics.PLANNED_NODES._value.get() - before == 1
    assert [(w[0], w[1]) for w in fake.writes if w[0] == "patch"] == [("patch", "b0")]
    # A heartbeat (only the resourceVersion moves) is not a change either.
    obj = copy.deepcopy(fake.nodes["a0"])
    obj["metadata"]["resourceVersion"] = "99999"
    wake_a.clear()
    rec.observe_node(NodeView.project(obj))
    assert rec.dirty == set() and not wake_a.is_set()


async def test_a_node_selected_by_two_pools_is_written_by_neither_and_reported_by_both() -> None:
    fake = FakeCluster(["n0"])
    pools = [_pool("p1", "a"), _pool("p2", "a")]
    rec = Reconciler(fake, clock=lambda: T0)
    await _pass(rec, "p1", pools=pools, nodes=fake.views(), pods=[])
    await rec.run_pass("p2")
    assert [w for w in fake.writes if w[0] == "patch"] == []
    statuses = {w[1]: w[2] for w in fake.writes if w[0] == "status"}
    for name in ("p1", "p2"):
        conflict = next(x for x in statuses[name]["conditions"] if x["type"] == "Conflict")
        assert conflict["status"] == "True"


async def test_a_pool_gone_from_the_watch_loses_its_gauges_without_a_cleanup_pass() -> None:
    """Seen live (tests/integration/test_alerts_prometheus.py): a pool deleted while it had no
    finalizer kept exporting Conflict=1, so GPUSharePoolConflict stayed active for it."""
    fake = FakeCluster(["n0"])
    pools = [_pool("gone-a", "a"), _pool("gone-b", "a")]
    rec = Reconciler(fake, clock=lambda: T0)
    await _pass(rec, "gone-a", pools=pools, nodes=fake.views(), pods=[])
    await rec.run_pass("gone-b")

    def conflict(pool: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "gpushare_pool_condition", {"pool": pool, "condition": "Conflict"}
        )

    assert (conflict("gone-a"), conflict("gone-b")) == (1, 1)
    rec.set_pools([pools[0]])
    assert conflict("gone-b") is None
    assert conflict("gone-a") == 1, "only the pool that left the watch is forgotten"
    metrics.forget_pool("gone-a")


async def test_an_invalid_pool_reports_all_four_conditions() -> None:
    fake = FakeCluster(["n0"])
    bad = _pool("bad", "a", mode="nonsense")
    rec = Reconciler(fake, clock=lambda: T0)
    result = await _pass(rec, "bad", pools=[bad], nodes=fake.views(), pods=[])
    assert result.summary == "invalid spec"
    status = next(w[2] for w in fake.writes if w[0] == "status")
    conditions = {x["type"]: (x["status"], x["reason"]) for x in status["conditions"]}
    assert conditions == {
        "Ready": ("False", "InvalidSpec"),
        "Progressing": ("False", "RolloutComplete"),
        "Degraded": ("True", "InvalidSpec"),
        "Conflict": ("False", "NoConflicts"),
    }
    assert [w for w in fake.writes if w[0] == "patch"] == []
    assert ("event", "InvalidSpec") in [(w[0], w[1]) for w in fake.writes]
    # Nothing changed: the next pass writes nothing.
    fake.writes.clear()
    await _pass(rec, "bad", pools=[{**bad, "status": status}], nodes=fake.views(), pods=[])
    assert fake.writes == []


async def test_the_cleanup_loop_retries_a_failed_pass_and_runs_until_the_nodes_are_restored() -> None:
    fake = FakeCluster(["n0", "n1"])
    ticks = itertools.count()
    rec = Reconciler(fake, clock=lambda: T0 + timedelta(seconds=2 * next(ticks)))
    await _pass(rec, "gpu", pools=[POOL], nodes=fake.views(), pods=[])
    assert all(c.LABEL_CGPU in obj["metadata"]["labels"] for obj in fake.nodes.values())
    deleting = {**POOL, "metadata": {**POOL["metadata"], "deletionTimestamp": "2026-11-29T12:00:00Z"}}
    calls = []

    def pools() -> list[dict[str, Any]]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the pool index is not there yet")
        return [deleting]

    result = await asyncio.wait_for(pool_loop("gpu", rec, pools, until_done=True), timeout=60)
    assert result is not None and result.done and len(calls) >= 3
    assert all(c.LABEL_CGPU not in obj["metadata"]["labels"] for obj in fake.nodes.values())
    assert _restart_results(fake) == {"n0": "None/", "n1": "None/"}  # nothing of gpushare's left


async def test_the_one_wait_tells_a_wake_up_from_a_timeout_and_a_stop() -> None:
    """``wait_woken``: True only when woken while not stopped (both the pool loop and the demand
    daemon wait this way)."""
    from gpushare.reconcile.loop import _Never, wait_woken

    wake = asyncio.Event()
    assert await wait_woken(wake, _Never(), 0.01) is False  # the timeout
    wake.set()
    assert await wait_woken(wake, _Never(), 5.0) is True

    class Stopped:
        def __bool__(self) -> bool:
            return True

        async def wait(self) -> None:
            return None

    assert await wait_woken(asyncio.Event(), Stopped(), 5.0) is False  # stopped, not woken


# --- an NVIDIA pool: its config in the plugin's ConfigMap first, then the label, then the count ----


def _nvidia_pool(replicas: int) -> dict[str, Any]:
    spec = {
        "nodeSelector": {"matchLabels": {NP: "a"}},
        "nvidia": {"strategy": "TimeSlicing", "replicas": replicas, "configPropagationSeconds": 60},
    }
    return {**POOL, "spec": spec}


async def test_an_nvidia_pool_labels_its_nodes_only_once_its_config_can_have_reached_the_plugin() -> None:
    fake = FakeCluster(["n0"])
    node = fake.nodes["n0"]
    node["metadata"]["labels"][c.LABEL_GPU_COUNT] = "2"
    node["status"]["allocatable"] = {c.RES_NVIDIA_GPU: "2"}
    foreign = {"default": "version: v1\n", "theirs": "x"}
    fake.configmaps[(c.NVIDIA_PLUGIN_NAMESPACE, c.NVIDIA_CONFIGS_CONFIGMAP)] = {
        "metadata": {"name": c.NVIDIA_CONFIGS_CONFIGMAP, "resourceVersion": "1"},
        "data": dict(foreign),
    }
    plugin = PodView(
        c.NVIDIA_PLUGIN_NAMESPACE,
        "nvdp-0",
        uid="p0",
        node_name="n0",
        phase="Running",
        labels=dict(c.NVIDIA_PLUGIN_LABELS),
        created="2026-11-29T11:00:00Z",
        ready=True,
    )
    clock = [T0]
    rec = Reconciler(fake, clock=lambda: clock[0])
    pool = _nvidia_pool(4)

    first = await _pass(rec, "gpu", pools=[pool], nodes=fake.views(), pods=[plugin])
    cm = fake.configmaps[(c.NVIDIA_PLUGIN_NAMESPACE, c.NVIDIA_CONFIGS_CONFIGMAP)]
    (name,) = set(cm["data"]) - set(foreign)
    assert name.startswith("gpushare-ts4-") and {k: cm["data"][k] for k in foreign} == foreign
    assert _node_writes(fake) == [] and not first.done  # the config is not in the pods' directory yet
    status = [w[2] for w in fake.writes if w[0] == "status"][-1]
    (shown,) = status["nodeStatuses"]
    assert (shown["phase"], shown["reason"]) == ("Pending", "ConfigPropagating")
    assert status["backend"] == "nvidia" and status["schedule"] == name

    clock[0] = T0 + timedelta(seconds=61)
    fake.writes.clear()
    await _pass(rec, "gpu", pools=[pool], nodes=fake.views(), pods=[plugin])
    (patch,) = _node_writes(fake)
    assert patch[2]["metadata"]["labels"] == {c.LABEL_NVIDIA_CONFIG: name, c.LABEL_POOL: "gpu"}
    assert [w for w in fake.writes if w[0] == "delete"] == []  # config-manager reloads the plugin

    # The node advertises replicas x GPUs: the reload is recorded Done, the pool is Ready.
    node["status"]["allocatable"] = {c.RES_NVIDIA_GPU: "8"}
    clock[0] = T0 + timedelta(seconds=75)
    fake.writes.clear()
    done = await _pass(rec, "gpu", pools=[pool], nodes=fake.views(), pods=[plugin])
    (record,) = _node_writes(fake)
    assert '"state":"Done"' in record[2]["metadata"]["annotations"][c.ANNOTATION_PLUGIN_RESTART]
    status = [w[2] for w in fake.writes if w[0] == "status"][-1]
    ready = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    assert ready["status"] == "True" and done.done
    assert status["capacity"] == {c.RES_NVIDIA_GPU: "8"}  # the pool's slots: 4 replicas x 2 GPUs

    # Deleted: the node's label goes back to none (the plugin's default config); the reload of a
    # node whose pool is gone is still NVIDIA's: no pod deleted.
    meta = {**pool["metadata"], "deletionTimestamp": "2026-11-29T12:02:00Z"}
    clock[0] = T0 + timedelta(seconds=90)
    fake.writes.clear()
    deleted = await _pass(rec, "gpu", pools=[{**pool, "metadata": meta}], nodes=fake.views(), pods=[plugin])
    restore = _node_writes(fake)[0]
    assert restore[2]["metadata"]["labels"] == {c.LABEL_NVIDIA_CONFIG: None, c.LABEL_POOL: None}
    assert '"backend":"nvidia"' in restore[2]["metadata"]["annotations"][c.ANNOTATION_PLUGIN_RESTART]
    # No config of its own to wait for (the plugin's default: any GPU advertised will do): the
    # reload is done in the same pass, and nothing of gpushare stays on the node.
    assert [w[0] for w in _node_writes(fake)] == ["patch", "patch"]
    assert c.ANNOTATION_PLUGIN_RESTART not in node["metadata"].get("annotations", {})
    assert c.ANNOTATION_OWNED not in node["metadata"].get("annotations", {})
    # The last pool on the ConfigMap: once no node names its config (restored in this very pass),
    # the config goes before the finalizer does, not an hour after it was written; the plugin's
    # own keys stay.
    assert deleted.done and cm["data"] == foreign
    assert json.loads(cm["metadata"]["annotations"][c.ANNOTATION_CONFIGS]) == {}


async def test_a_config_no_pool_wants_goes_after_the_retention_and_the_last_pool_takes_its_own() -> None:
    """Two pools on one ConfigMap: one changes its replicas, then is deleted, while the other
    lives; their unused configs go at the live pool's first pass past the retention (a setting),
    never while a node names them; the last pool's cleanup takes what is left."""
    fake = FakeCluster(["n0", "n1"])
    fake.nodes["n1"]["metadata"]["labels"][NP] = "b"
    foreign = {"default": "version: v1\n"}
    where = (c.NVIDIA_PLUGIN_NAMESPACE, c.NVIDIA_CONFIGS_CONFIGMAP)
    fake.configmaps[where] = {
        "metadata": {"name": c.NVIDIA_CONFIGS_CONFIGMAP, "resourceVersion": "1"},
        "data": dict(foreign),
    }
    cm = fake.configmaps[where]
    clock = [T0]
    rec = Reconciler(fake, clock=lambda: clock[0], config_retention=timedelta(minutes=5))
    a4, a2 = _nvidia_pool(4), _nvidia_pool(2)
    b = {**_nvidia_pool(3), "metadata": {**POOL["metadata"], "name": "b", "uid": "uid-b"}}
    b["spec"] = {**b["spec"], "nodeSelector": {"matchLabels": {NP: "b"}}}

    async def passes(at: timedelta, a: dict[str, Any] | None, *, only: str | None = None) -> None:
        clock[0] = T0 + at
        pools = [p for p in (a, b) if p is not None]
        for name in [only] if only else [p["metadata"]["name"] for p in pools]:
            await _pass(rec, name, pools=pools, nodes=fake.views(), pods=[])

    def ours() -> set[str]:
        return set(cm["data"]) - set(foreign)

    await passes(timedelta(0), a4)
    await passes(timedelta(seconds=61), a4)  # propagated: the nodes are labelled
    ts4 = fake.nodes["n0"]["metadata"]["labels"][c.LABEL_NVIDIA_CONFIG]
    ts3 = fake.nodes["n1"]["metadata"]["labels"][c.LABEL_NVIDIA_CONFIG]
    assert ours() == {ts4, ts3}
    await passes(timedelta(seconds=70), a2)  # replicas 4 -> 2: a new config; n0 still names ts4
    (ts2,) = ours() - {ts4, ts3}
    await passes(timedelta(seconds=140), a2)
    assert fake.nodes["n0"]["metadata"]["labels"][c.LABEL_NVIDIA_CONFIG] == ts2
    await passes(timedelta(seconds=200), a2)
    assert ours() == {ts4, ts3, ts2}, "unused, but younger than the retention: kept for a switch back"
    await passes(timedelta(minutes=5, seconds=1), a2)
    assert ours() == {ts3, ts2}, "unused and older than the retention: gone"

    # Pool "gpu" deleted while "b" lives on the ConfigMap: its cleanup leaves the ConfigMap to
    # b's passes, which take ts2 once it is as old as the retention.
    meta = {**a2["metadata"], "deletionTimestamp": "2026-11-29T12:10:00Z"}
    gone = {**a2, "metadata": meta}
    await passes(timedelta(minutes=6), gone, only="gpu")
    assert c.LABEL_NVIDIA_CONFIG not in fake.nodes["n0"]["metadata"]["labels"]
    assert ours() == {ts3, ts2}
    await passes(timedelta(minutes=7), None, only="b")
    assert ours() == {ts3}
    # The last pool deleted: nothing of gpushare's is left in the ConfigMap; the foreign key is.
    meta = {**b["metadata"], "deletionTimestamp": "2026-11-29T12:20:00Z"}
    b = {**b, "metadata": meta}
    await passes(timedelta(minutes=8), None, only="b")
    assert cm["data"] == foreign
    assert json.loads(cm["metadata"]["annotations"][c.ANNOTATION_CONFIGS]) == {}


# --- a pool's reconcile daemon stopped by Kopf (gpushare.handlers.pools) -------------------------

#: Kopf's decorator types the daemon as its callback protocol: untyped here, called with its kwargs.
reconcile_loop: Any = pools_handlers.reconcile_loop
REASON = kopf.DaemonStoppingReason


def _gauge(pool: str, condition: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "gpushare_pool_condition", {"pool": pool, "condition": condition}
    )


@pytest.mark.parametrize(
    ("reason", "gives_up"),
    [
        (REASON.OPERATOR_PAUSING, True),
        (REASON.OPERATOR_PAUSING | REASON.DAEMON_CANCELLED, True),
        (REASON.OPERATOR_EXITING, True),
        (REASON.RESOURCE_DELETED, False),
        (REASON.RESOURCE_DELETED | REASON.OPERATOR_EXITING, False),
        (None, False),
    ],
)
def test_a_replica_gives_a_pool_up_when_its_daemon_stops_unless_the_pool_is_being_deleted(
    reason: kopf.DaemonStoppingReason | None, gives_up: bool
) -> None:
    assert pools_handlers.gives_up_pool(reason) is gives_up


class _ReportingCluster(FakeCluster):
    """Says when a pass wrote the pool's status (its report, after the gauges)."""

    def __init__(self, nodes: list[str]) -> None:
        super().__init__(nodes)
        self.reported = asyncio.Event()

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        self.reported.set()
        return await super().patch_pool_status(name, status)


@pytest.mark.parametrize("reason", [REASON.OPERATOR_PAUSING, REASON.RESOURCE_DELETED])
async def test_a_replica_paused_by_peering_exports_none_of_the_pools_gauges(
    reason: kopf.DaemonStoppingReason,
) -> None:
    """Issue 38, seen live with the chart's two replicas: a replica that reconciled a pool and was
    then paused by peering (a replica of a higher priority took over) went on exporting the pool's
    last gauges, next to the new leader's. Paused, it forgets them (and the pool's wake-up, so its
    probe says 0); stopped because the pool is being deleted, it keeps them for the cleanup."""
    fake = _ReportingCluster(["n0"])
    rec = Reconciler(fake, clock=lambda: T0)
    for view in fake.views():
        rec.observe_node(view)
    rec.nodes_listed({v.name for v in fake.views()})
    rec.pods_listed(set())
    memo = OperatorState(started=Started(api=cast(Any, None), cluster=cast(Any, fake), reconciler=rec))
    setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
    daemon = asyncio.create_task(
        reconcile_loop(name="gpu", memo=memo, stopped=AsyncFlagWaiter(setter), gpushare_pools={"gpu": [POOL]})
    )
    try:
        await asyncio.wait_for(fake.reported.wait(), timeout=10)  # a pass reported the pool
        assert _gauge("gpu", "Ready") is not None
        assert "gpu" in rec.wakeups
        setter.set(reason=reason)
        await asyncio.wait_for(daemon, timeout=10)
        if reason is REASON.OPERATOR_PAUSING:
            assert [_gauge("gpu", ctype) for ctype in metrics.CONDITIONS] == [None] * 4
            assert rec.wakeups == {} and rec.reports == {}
        else:
            assert _gauge("gpu", "Ready") is not None and "gpu" in rec.wakeups
    finally:
        daemon.cancel()
        metrics.forget_pool("gpu")


async def test_a_mig_pools_config_is_an_entry_of_the_managers_config_yaml_or_a_clear_error() -> None:
    """NVIDIA's MIG manager reads only config.yaml: a ConfigMap without one holds the pool back with
    a message saying what to do (no traceback, no node label); once there, the pool's config is
    added as an entry beside the others, the rest of the ConfigMap as it was."""
    fake = FakeCluster(["n0"])
    fake.configmaps[(c.NVIDIA_PLUGIN_NAMESPACE, c.NVIDIA_CONFIGS_CONFIGMAP)] = {
        "metadata": {"name": c.NVIDIA_CONFIGS_CONFIGMAP, "resourceVersion": "1"},
        "data": {},
    }
    where = (c.MIG_CONFIGS_NAMESPACE, c.MIG_CONFIGS_CONFIGMAP)
    meta = {"name": c.MIG_CONFIGS_CONFIGMAP, "namespace": c.MIG_CONFIGS_NAMESPACE, "resourceVersion": "1"}
    fake.configmaps[where] = {"metadata": meta, "data": {"other": "x"}}
    rec = Reconciler(fake, clock=lambda: T0)
    mig = {"strategy": "mixed", "geometry": [{"profiles": {"1g.5gb": 7}}]}
    pool = {
        **POOL,
        "spec": {"nodeSelector": {"matchLabels": {NP: "a"}}, "nvidia": {"strategy": "MIG", "mig": mig}},
    }

    await _pass(rec, "gpu", pools=[pool], nodes=fake.views(), pods=[])
    assert _node_writes(fake) == [] and fake.configmaps[where]["data"] == {"other": "x"}
    status = json.dumps([w[2] for w in fake.writes if w[0] == "status"][-1])
    assert "has no key config.yaml" in status and "migManager.config.name" in status, status

    fake.configmaps[where]["data"]["config.yaml"] = migsim.CHART_DOCUMENT
    await _pass(rec, "gpu", pools=[pool], nodes=fake.views(), pods=[])
    data = fake.configmaps[where]["data"]
    assert set(data) == {"other", "config.yaml"} and data["other"] == "x"
    entries = migsim.configs_in(data)
    ours = {k for k in entries if k.startswith("gpushare-mig-")}
    assert len(ours) == 1 and set(entries) - ours == set(
        migsim.configs_in({"config.yaml": migsim.CHART_DOCUMENT})
    )
