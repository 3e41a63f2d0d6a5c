"""NVIDIA's backend: config names from content, what a node must advertise, which switches
disrupt running pods, and how gpushare keeps its keys in the plugin's ConfigMap."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.api.v1alpha1 import Nvidia, parse_pool
from gpushare.backends import backend_for
from gpushare.backends.nvidia import NVIDIA, config
from gpushare.backends.nvidia.configmap import Wanted, plan_configmap, release_plan, written
from gpushare.policy.demand import busy_nodes
from gpushare.policy.planner import Action, plan
from gpushare.policy.views import NodeView, PodView

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def nvidia_pool(name: str = "ts", **nvidia: Any) -> Any:
    return parse_pool(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {"np": name}},
                "nvidia": {"strategy": "TimeSlicing", **nvidia},
            },
        }
    )


def test_the_config_name_says_the_sharing_and_changes_with_any_edit() -> None:
    four = Nvidia(strategy="TimeSlicing", replicas=4)
    name = config.name_of(four)
    assert name.startswith("gpushare-ts4-")
    parsed = config.ConfigName.parse(name)
    assert parsed is not None and (parsed.strategy, parsed.replicas, parsed.resource) == (
        "TimeSlicing",
        4,
        c.RES_NVIDIA_GPU,
    )
    edited = Nvidia(strategy="TimeSlicing", replicas=4, fail_requests_greater_than_one=True)
    assert config.name_of(edited) != name and config.name_of(edited).startswith("gpushare-ts4-")
    shared = config.name_of(Nvidia(strategy="MPS", replicas=3, rename_by_default=True))
    assert shared.startswith("gpushare-mps3-shared-")
    assert config.ConfigName.parse(shared).resource == c.RES_NVIDIA_GPU_SHARED  # type: ignore[union-attr]
    assert config.ConfigName.parse("ts4") is None and config.ConfigName.parse(None) is None


def test_the_document_is_the_plugins_v1_config() -> None:
    doc = yaml.safe_load(config.document(Nvidia(strategy="TimeSlicing", replicas=4)))
    assert doc == {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": False,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
            }
        },
    }
    mps = yaml.safe_load(config.document(Nvidia(strategy="MPS", replicas=2)))
    assert mps["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
    }
    assert "sharing" not in yaml.safe_load(config.document(Nvidia(strategy="None")))


def test_a_node_advertises_replicas_times_its_gpus() -> None:
    mode = config.name_of(Nvidia(strategy="TimeSlicing", replicas=4))
    two_gpus = {c.LABEL_GPU_COUNT: "2"}
    assert NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "8"}, two_gpus)
    assert not NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "4"}, two_gpus)  # still ts2
    assert not NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "2"}, two_gpus)  # still unshared
    # GPU Feature Discovery's count serves as well; with none, a multiple of the replicas.
    assert NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "8"}, {c.LABEL_NVIDIA_GPU_COUNT: "2"})
    assert NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "12"}, {})
    assert not NVIDIA.advertises(mode, {c.RES_NVIDIA_GPU: "2"}, {})
    assert "nvidia.com/gpu: 8" in NVIDIA.pending_message(mode, {c.RES_NVIDIA_GPU: "2"}, two_gpus)
    assert "advertises nvidia.com/gpu: 2" in NVIDIA.stale_message(mode, {c.RES_NVIDIA_GPU: "2"}, two_gpus)


def test_fewer_replicas_or_another_strategy_disrupts_more_replicas_does_not() -> None:
    ts2, ts4 = (config.name_of(Nvidia(strategy="TimeSlicing", replicas=n)) for n in (2, 4))
    mps4 = config.name_of(Nvidia(strategy="MPS", replicas=4))
    assert NVIDIA.disrupts(ts4, ts2) and not NVIDIA.disrupts(ts2, ts4)
    assert NVIDIA.disrupts(ts4, mps4) and NVIDIA.disrupts("", ts4) and NVIDIA.disrupts(ts4, "")
    assert NVIDIA.holds_shared_gpu({c.RES_NVIDIA_GPU: 1}) and not NVIDIA.holds_shared_gpu({c.RES_GPU_MEM: 4})


def _node(name: str, labels: dict[str, str], alloc: str = "8") -> NodeView:
    return NodeView(name, labels, allocatable={c.RES_NVIDIA_GPU: alloc}, ready=True)


def test_the_planner_labels_an_nvidia_pools_nodes_and_holds_fewer_replicas_under_a_running_pod() -> None:
    p4 = nvidia_pool(replicas=4)
    assert backend_for(p4.spec) is NVIDIA
    n = _node("n0", {"np": "ts", c.LABEL_GPU_COUNT: "2"}, alloc="2")
    first = plan([p4], [n], now=NOW).by_node()["n0"]
    assert first.action is Action.APPLY
    assert first.label_patch == {c.LABEL_NVIDIA_CONFIG: NVIDIA.pool_mode(p4.spec), c.LABEL_POOL: "ts"}
    assert first.plugin_restart is not None and first.plugin_restart.pending

    labelled = _node("n0", {"np": "ts", c.LABEL_GPU_COUNT: "2", **first.label_patch})  # type: ignore[dict-item]
    pod = PodView("default", "job", uid="u", node_name="n0", phase="Running", requests={c.RES_NVIDIA_GPU: 1})
    p2 = nvidia_pool(replicas=2)
    held = plan([p2], [labelled], [pod], now=NOW).by_node()["n0"]
    assert held.action is Action.HOLD and held.blocking_pods == (pod,)
    assert c.LABEL_NVIDIA_CONFIG in held.message and "default/job" in held.message
    # More replicas under the same pod: applied at once.
    p8 = nvidia_pool(replicas=8)
    grown = plan([p8], [labelled], [pod], now=NOW).by_node()["n0"]
    assert grown.action is Action.APPLY and not grown.blocking_pods


def test_a_node_moving_from_an_ack_pool_to_an_nvidia_pool_gets_its_ack_labels_back() -> None:
    ack_labels = {
        c.LABEL_CGPU: "true",
        c.LABEL_DISABLE_ISOLATION: "false",
        c.LABEL_SCHEDULE: "cgpu",
        c.LABEL_PLACEMENT: "binpack",
        c.LABEL_POOL: "ack",
    }
    owned = json.dumps({"pool": "ack", "prior": {}})
    n = NodeView("n0", {"np": "ts", **ack_labels}, annotations={c.ANNOTATION_OWNED: owned}, ready=True)
    pool = nvidia_pool(replicas=4)
    moved = plan([pool], [n], now=NOW).by_node()["n0"]
    assert moved.action is Action.APPLY and moved.reason == "MovedPool"
    assert moved.label_patch == {
        c.LABEL_CGPU: None,
        c.LABEL_DISABLE_ISOLATION: None,
        c.LABEL_SCHEDULE: c.SCHEDULE_DEFAULT,
        c.LABEL_PLACEMENT: None,
        c.LABEL_NVIDIA_CONFIG: NVIDIA.pool_mode(pool.spec),
        c.LABEL_POOL: "ts",
    }
    ack_pod = PodView("default", "old", uid="o", node_name="n0", phase="Running", requests={c.RES_GPU_MEM: 4})
    held = plan([pool], [n], [ack_pod], now=NOW).by_node()["n0"]
    assert held.action is Action.HOLD and held.blocking_pods == (ack_pod,)


# --- the ConfigMap ---------------------------------------------------------------------------------


def _cm(data: dict[str, str], ours: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "configs", "namespace": "nv", "resourceVersion": "7"}
    if ours is not None:
        meta["annotations"] = {c.ANNOTATION_CONFIGS: json.dumps(ours)}
    return {"metadata": meta, "data": data}


W = Wanted("gpushare-ts4-aaaaaaaa", "doc-4", timedelta(seconds=90))


def test_a_missing_config_is_added_and_is_ready_only_after_it_propagates() -> None:
    p = plan_configmap(_cm({"default": "d"}), [W], in_use=(), now=NOW)
    assert p.patch is not None and p.patch["data"] == {W.name: "doc-4"}
    assert p.patch["metadata"]["resourceVersion"] == "7"
    assert written({"metadata": p.patch["metadata"]}) == {W.name: NOW}
    assert W.name not in p.ready and p.waiting[W.name] == timedelta(seconds=90)

    there = _cm({"default": "d", W.name: "doc-4"}, {W.name: "2026-12-03T11:59:00Z"})
    soon = plan_configmap(there, [W], in_use=(), now=NOW)
    assert soon.patch is None and soon.waiting[W.name] == timedelta(seconds=30)
    later = plan_configmap(there, [W], in_use=(), now=NOW + timedelta(seconds=31))
    assert later.ready == {W.name} and later.patch is None


def test_only_its_own_unused_keys_are_deleted_and_foreign_keys_are_never_touched() -> None:
    old = "gpushare-ts2-bbbbbbbb"
    cm = _cm(
        {"default": "d", old: "doc-2", W.name: "doc-4", "mine": "x"},
        {old: "2026-12-01T00:00:00Z", W.name: ""},
    )
    kept = plan_configmap(cm, [W], in_use={old}, now=NOW)
    assert kept.patch is None and kept.ready == {W.name}
    gone = plan_configmap(cm, [W], in_use=(), now=NOW)
    assert gone.removed == (old,) and gone.patch is not None
    assert gone.patch["data"] == {old: None}
    assert json.loads(gone.patch["metadata"]["annotations"][c.ANNOTATION_CONFIGS]) == {W.name: ""}
    # Written only half an hour ago: kept, for a pool that switches back.
    recent = _cm({old: "doc-2", W.name: "doc-4"}, {old: "2026-12-03T11:30:00Z", W.name: ""})
    assert plan_configmap(recent, [W], in_use=(), now=NOW).removed == ()
    clash = plan_configmap(_cm({W.name: "someone else's"}), [W], in_use=(), now=NOW)
    assert clash.foreign == (W.name,) and clash.patch is None and not clash.ready


def test_the_retention_of_an_unused_key_is_a_setting() -> None:
    old = "gpushare-ts2-bbbbbbbb"
    recent = _cm({old: "doc-2", W.name: "doc-4"}, {old: "2026-12-03T11:59:30Z", W.name: ""})
    short = timedelta(seconds=20)
    assert plan_configmap(recent, [W], in_use=(), now=NOW, retention=short).removed == (old,)
    named = plan_configmap(recent, [W], in_use={old}, now=NOW, retention=short)
    assert named.removed == () and named.expires is None, "a key a node names never ages out"
    kept = plan_configmap(recent, [W], in_use=(), now=NOW, retention=timedelta(minutes=1))
    # Written 30 s ago: the pass looks again when it is a minute old.
    assert kept.removed == () and kept.expires == timedelta(seconds=30)


def test_the_last_pools_cleanup_deletes_every_key_of_gpushares_that_no_node_names() -> None:
    named = "gpushare-ts2-bbbbbbbb"
    foreign = {"default": "d", "theirs": "x"}
    cm = _cm({**foreign, W.name: "doc-4", named: "doc-2"}, {W.name: "2026-12-03T11:59:59Z", named: ""})
    p = release_plan(cm, in_use={named}, now=NOW)
    # Written a second ago, yet gone: no pool is left to switch back to it. A key a node still
    # names (cleanup: Retain) stays; a key gpushare did not write is never in the patch.
    assert p.removed == (W.name,) and p.patch is not None and p.patch["data"] == {W.name: None}
    assert json.loads(p.patch["metadata"]["annotations"][c.ANNOTATION_CONFIGS]) == {named: ""}
    assert release_plan(_cm(foreign), in_use=(), now=NOW).patch is None
    assert release_plan(_cm(foreign, {}), in_use=(), now=NOW).patch is None


@pytest.mark.parametrize("strategy", ["TimeSlicing", "MPS"])
def test_sharing_needs_two_replicas_and_an_nvidia_pool_takes_no_ack_field(strategy: str) -> None:
    with pytest.raises(ValueError, match="replicas >= 2"):
        Nvidia(strategy=strategy, replicas=1)
    spec = nvidia_pool(replicas=2).spec
    assert spec.device_plugin.namespace == c.NVIDIA_PLUGIN_NAMESPACE
    assert spec.device_plugin.pod_selector.match_labels == c.NVIDIA_PLUGIN_LABELS
    assert not spec.isolates_memory


def test_a_node_running_an_nvidia_gpu_pod_is_busy_never_idle_nor_lent() -> None:
    pods = [
        PodView("default", "a", node_name="n0", phase="Running", requests={c.RES_NVIDIA_GPU: 1}),
        PodView("default", "b", node_name="n1", phase="Succeeded", requests={c.RES_NVIDIA_GPU: 1}),
        PodView("default", "c", node_name="n2", phase="Running"),
    ]
    assert busy_nodes(pods) == {"n0"}
