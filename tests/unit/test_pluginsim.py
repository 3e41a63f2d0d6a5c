"""The device-plugin simulator's pure mapping: node labels + agent inventory -> advertised resources."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpushare import constants as c
from gpushare.devcluster.pluginsim import (
    LABEL_SIMULATED,
    NUDGE_AFTER,
    RES_ALIYUN_GPU,
    RES_NVIDIA_GPU,
    RESOURCES,
    PendingPod,
    advertised_resources,
    is_pending,
    nudges_due,
    plugin_isolation,
    plugin_mode,
    seen_pod,
    state_annotation,
    status_patch,
)
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.inventory import Inventory, collect_inventory


def inventory(*mib: int) -> Inventory:
    return collect_inventory(FakeNVML(gpus=[FakeGPU(name="Tesla V100", memory_mib=m) for m in mib]))


def nonzero(resources: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in resources.items() if v != "0"}


def test_default_and_absent_label_advertise_whole_gpus_only() -> None:
    inv = inventory(16160, 16160)
    for labels in ({}, {c.LABEL_SCHEDULE: "default"}):
        res = advertised_resources(labels, inv)
        assert nonzero(res) == {RES_NVIDIA_GPU: "2"}
        assert set(res) == set(RESOURCES), "every other mode's resource is written as 0"


@pytest.mark.parametrize("mode", ["cgpu", "share", "mps"])
def test_memory_modes_advertise_floored_gib_times_count_and_gpu_count(mode: str) -> None:
    # A 16 GB V100 reports 16160 MiB: ACK floors it to 15 GiB per GPU.
    res = advertised_resources({c.LABEL_SCHEDULE: mode}, inventory(16160, 16160))
    assert nonzero(res) == {c.RES_GPU_MEM: "30", c.RES_GPU_COUNT: "2"}
    assert res[c.RES_GPU_CORE] == "0" and res[RES_NVIDIA_GPU] == "0"


def test_core_mem_adds_100_percent_per_gpu() -> None:
    res = advertised_resources({c.LABEL_SCHEDULE: "core_mem"}, inventory(23028, 23028))
    assert nonzero(res) == {c.RES_GPU_MEM: "44", c.RES_GPU_COUNT: "2", c.RES_GPU_CORE: "200"}


def test_first_gpu_memory_is_assumed_for_all_like_ack() -> None:
    res = advertised_resources({c.LABEL_SCHEDULE: "cgpu"}, inventory(24576, 16384))
    assert res[c.RES_GPU_MEM] == "48"


def test_heterogeneous_nodes_each_get_their_own_inventory() -> None:
    labels = {c.LABEL_SCHEDULE: "cgpu"}
    assert advertised_resources(labels, inventory(15360))[c.RES_GPU_MEM] == "15"
    assert advertised_resources(labels, inventory(81920))[c.RES_GPU_MEM] == "80"


def test_topology_and_unknown_modes() -> None:
    assert nonzero(advertised_resources({c.LABEL_SCHEDULE: "topology"}, inventory(16384))) == {
        RES_ALIYUN_GPU: "1"
    }
    assert nonzero(advertised_resources({c.LABEL_SCHEDULE: "mig"}, inventory(16384))) == {}


def test_status_patch_sets_capacity_and_allocatable_alike() -> None:
    patch = status_patch({c.LABEL_SCHEDULE: "cgpu"}, inventory(16384))
    assert patch["status"]["capacity"] == patch["status"]["allocatable"]
    assert patch["status"]["capacity"][c.RES_GPU_MEM] == "16"


def test_mode_isolation_and_state_annotation() -> None:
    labels = {c.LABEL_SCHEDULE: "share", c.LABEL_DISABLE_ISOLATION: "true"}
    assert plugin_mode(labels) == "share" and plugin_isolation(labels) == "disabled"
    assert plugin_isolation({c.LABEL_DISABLE_ISOLATION: "false"}) == "enabled"
    assert plugin_mode({}) == "default"
    raw = state_annotation(labels, "uid-1", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert json.loads(raw) == {
        "pod": "uid-1",
        "mode": "share",
        "isolation": "disabled",
        "at": "2026-01-02T03:04:05Z",
    }
    assert seen_pod({"gpushare.io/simulated-plugin": raw}) == "uid-1"
    assert seen_pod({"gpushare.io/simulated-plugin": "not json"}) == ""
    assert seen_pod(None) == ""


def _pod(node: str, uid: str, phase: str = "Running", deleting: bool = False) -> dict[str, object]:
    meta: dict[str, object] = {"uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


def _ack_node(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {LABEL_SIMULATED: "ack"}}}


async def test_only_running_pods_on_opted_in_nodes_reach_the_api() -> None:
    from kubernetes_asyncio import client

    from gpushare.devcluster.pluginsim import PluginSimulator

    calls: list[tuple[str, str]] = []

    class Recording(PluginSimulator):
        async def handle(self, node_name: str, uid: str) -> None:
            calls.append((node_name, uid))

    async with client.ApiClient() as api:  # never called: handle() is replaced
        sim = Recording(api)
        await sim._pod("ADDED", _pod("plain", "u0"))  # a node that does not opt in: nothing read
        await sim._pod("ADDED", _pod("sim", "u1", phase="Pending"))
        assert calls == []
        await sim._node("ADDED", _ack_node("sim"))
        assert calls == [], "no Running pod yet"
        await sim._pod("MODIFIED", _pod("sim", "u1"))
        await sim._pod("MODIFIED", _pod("sim", "u2", deleting=True))
        assert calls == [("sim", "u1")]
        # A pod Running before its node's event arrived is handled when the node opts in.
        await sim._pod("ADDED", _pod("late", "u3"))
        await sim._node("ADDED", _ack_node("late"))
        # A node of NVIDIA's plugin (the node watch brings both kinds) is not ACK's to play.
        await sim._pod("ADDED", _pod("nv", "u4"))
        await sim._node("ADDED", {"metadata": {"name": "nv", "labels": {LABEL_SIMULATED: "nvidia"}}})
        assert calls == [("sim", "u1"), ("late", "u3")]


# --- kwok's missed pods (kubernetes-sigs/kwok#1572) -------------------------------------------


def _bound_pod(phase: str | None, node: str = "n1", deleting: bool = False) -> dict[str, object]:
    meta: dict[str, object] = {"namespace": "kube-system", "name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase} if phase else {}}


def test_only_a_bound_pending_pod_is_followed() -> None:
    assert is_pending(_bound_pod("Pending"))
    assert is_pending(_bound_pod(None))  # no status yet: Pending
    assert not is_pending(_bound_pod("Running"))
    assert not is_pending(_bound_pod("Pending", node=""))  # not bound: the scheduler's, not kwok's
    assert not is_pending(_bound_pod("Pending", deleting=True))


def test_a_pod_is_shown_to_kwok_again_once_per_span_it_stays_pending() -> None:
    t0 = datetime(2026, 12, 6, tzinfo=UTC)
    fresh = PendingPod("ns", "fresh", "n1", t0)
    once = PendingPod("ns", "once", "n1", t0, nudges=1)
    pending = {("ns", "fresh"): fresh, ("ns", "once"): once}
    assert nudges_due(pending, t0 + NUDGE_AFTER - timedelta(seconds=1)) == []
    assert nudges_due(pending, t0 + NUDGE_AFTER) == [fresh]
    assert nudges_due(pending, t0 + 2 * NUDGE_AFTER) == [fresh, once]
