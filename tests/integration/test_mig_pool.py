"""A MIG pool on the local control plane with the operator running and the simulated MIG manager
(``pluginsim``): the operator writes the pool's mig-parted config into its own key of the MIG
manager's ConfigMap and the plugin's config into the plugin's, labels each node's
``nvidia.com/mig.config`` through the guarded rollout, and calls a node Ready only once the manager
reports ``success`` for that config and the node advertises the geometry's devices; deleting the
pool gives each node its MIG config back (``all-disabled`` where it had none)."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import migsim, wait_for
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.demo import NVIDIA_CONFIGS
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet, ensure_nvidia_plugin
from gpushare.devcluster.pluginsim import ANNOTATION_MIG, ANNOTATION_MIG_DELAY, ANNOTATION_MIG_START
from gpushare.gpu.fake import FakeGPU
from gpushare.k8s.generated import refused
from support.holds import hold_kept
from support.operator_proc import OperatorProc
from support.pools import MERGE, PoolApi
from support.recorder import WatchRecorder

A100 = FakeGPU(name="NVIDIA A100-SXM4-40GB", memory_mib=40960, mig=False)
OPERANDS = {
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
}
MIXED = {"geometry": [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}]}
#: What a node of two A100-40GB advertises under MIXED.
MIXED_DEVICES = {"nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-2g.10gb": "2", "nvidia.com/mig-1g.5gb": "4"}


@pytest.fixture
async def mig_configmaps(api: client.ApiClient) -> None:
    """The plugin's ConfigMap and the MIG manager's (with the chart's own configs), created when
    absent; the operator adds and removes its own keys."""
    core = client.CoreV1Api(api)
    await ensure_nvidia_plugin(api, NVIDIA_CONFIGS)
    with refused(409):
        await core.create_namespace(cast(Any, {"metadata": {"name": c.MIG_CONFIGS_NAMESPACE}}))
    with refused(409):
        body = {
            "metadata": {"name": c.MIG_CONFIGS_CONFIGMAP},
            "data": {migsim.CHART_KEY: migsim.CHART_DOCUMENT},
        }
        await core.create_namespaced_config_map(c.MIG_CONFIGS_NAMESPACE, cast(Any, body))


async def _mig_file(core: client.CoreV1Api) -> tuple[dict[str, str], dict[str, Any]]:
    """The MIG manager's ConfigMap's data, and the configs of its config.yaml (what the manager reads)."""
    cm = await core.read_namespaced_config_map(c.MIG_CONFIGS_CONFIGMAP, c.MIG_CONFIGS_NAMESPACE)
    data = dict(cm.data or {})
    return data, migsim.configs_in(data)


@pytest.fixture
async def pools(api: client.ApiClient, operator: OperatorProc) -> AsyncIterator[PoolApi]:
    helper = PoolApi(api)
    yield helper
    for name in helper.created:
        await helper.delete(name)


async def _condition(pools: PoolApi, name: str, kind: str) -> dict[str, Any]:
    obj = await pools.get(name)
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((dict(x) for x in conditions if x.get("type") == kind), {})


async def _statuses(pools: PoolApi, name: str) -> dict[str, dict[str, Any]]:
    obj = await pools.get(name)
    return {s["name"]: s for s in ((obj or {}).get("status") or {}).get("nodeStatuses") or []}


async def _applied(core: client.CoreV1Api, name: str) -> migsim.MigState | None:
    """What the simulated MIG manager last did on the node, once it finished (success or failed)."""
    node = await core.read_node(name)
    found = migsim.MigState.parse((node.metadata.annotations or {}).get(ANNOTATION_MIG))
    return found if found is not None and found.state != migsim.PENDING else None


async def _event(api: client.ApiClient, pool: str, reason: str) -> Any:
    """The first Event of ``reason`` about the pool (posted in the operator's events namespace)."""

    async def found() -> Any:
        events = await client.CoreV1Api(api).list_namespaced_event(
            "default", field_selector=f"involvedObject.kind={c.KIND},involvedObject.name={pool}"
        )
        return next((e for e in events.items if e.reason == reason), None)

    return await wait_for(found, what=f"Event {reason} on GPUSharePool {pool}", timeout_s=30)


async def _node(core: client.CoreV1Api, name: str) -> tuple[dict[str, str], dict[str, str]]:
    node = await core.read_node(name)
    alloc = {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/mig-")}
    return dict(node.metadata.labels or {}), alloc


async def _a100_nodes(
    fake_nodes: FakeNodeSet, n: int, prefix: str, nodepool: str, labels: Mapping[str, str] | None = None
) -> list[str]:
    """``n`` kwok nodes of 2 x A100-40GB in node pool ``nodepool``, NVIDIA's plugin and MIG manager
    simulated, the GPU operands' labels set (and ``labels``)."""
    return await fake_nodes.create(
        n,
        prefix=prefix,
        pool_labels={POOL_LABEL: nodepool},
        gpus_per_node=2,
        simulate_plugin=True,
        plugin="nvidia",
        gpus=[A100, A100],
        extra_labels={**OPERANDS, **(labels or {})},
    )


def _ready(pools: PoolApi, name: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """A check for ``wait_for``: pool ``name``'s Ready condition once it is True."""

    async def ready() -> dict[str, Any] | None:
        found = await _condition(pools, name, "Ready")
        return found if found.get("status") == "True" else None

    return ready


def _mig_pod(
    name: str, namespace: str, node: str, profile: str, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod bound to ``node`` asking for one MIG device of ``profile``."""
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.invalid/cuda-sample:fake",
                    "resources": {"limits": {f"nvidia.com/mig-{profile}": "1"}},
                }
            ],
        },
    }


async def test_a_mixed_geometry_pool_is_ready_only_once_every_node_applied_it_and_restored_on_delete(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi, mig_configmaps: None
) -> None:
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    nodes = await _a100_nodes(
        fake_nodes, 2, "migs", np, {c.LABEL_MIG_CONFIG: "all-1g.5gb", c.LABEL_NVIDIA_GPU_COUNT: "2"}
    )

    async def at_1g() -> bool:
        done = [await _applied(core, n) for n in nodes]
        seven = ((("1g.5gb", 7),),) * 2
        return all(
            d is not None and (d.label, d.state, d.devices) == ("all-1g.5gb", migsim.SUCCESS, seven)
            for d in done
        )

    # Before the pool: the manager applied the nodes' own config, with its success.
    await wait_for(at_1g, what="the nodes at all-1g.5gb (7 x 1g.5gb per GPU)", timeout_s=60)
    name = f"mig-{np}"
    await pools.create_pool(
        name, {POOL_LABEL: np}, nvidia={"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0}
    )
    samples: list[str] = []

    async def ready() -> dict[str, Any] | None:
        found = await _condition(pools, name, "Ready")
        if found.get("status") != "True":
            return None
        # Ready: every node applied the pool's config (nodes only move forward, so a node read
        # after the pool said Ready that is not there yet was not there when it said so).
        for n in nodes:
            labels, alloc = await _node(core, n)
            samples.append(
                f"{n}: {labels.get(c.LABEL_MIG_CONFIG)} {labels.get(c.LABEL_MIG_CONFIG_STATE)} {alloc}"
            )
            assert labels.get(c.LABEL_MIG_CONFIG, "").startswith("gpushare-mig-"), samples
            assert labels.get(c.LABEL_MIG_CONFIG_STATE) == "success", samples
            assert alloc == MIXED_DEVICES, samples
        return found

    await wait_for(ready, what=f"{name} Ready", timeout_s=120)
    config = (await _node(core, nodes[0]))[0][c.LABEL_MIG_CONFIG]
    # The pool's config is an entry of config.yaml, the one file the MIG manager reads, beside the
    # chart's entries; no key of its own.
    data, entries = await _mig_file(core)
    assert config in entries and {"all-disabled", "all-1g.5gb"} <= set(entries), sorted(entries)
    assert set(data) == {migsim.CHART_KEY}, sorted(data)
    statuses = await _statuses(pools, name)
    assert {n: statuses[n]["phase"] for n in nodes} == dict.fromkeys(nodes, "Ready")

    # Delete: each node's MIG config back (all-1g.5gb), applied by the manager; no label of the
    # pool's left; the pool's entry leaves config.yaml (the chart's stay).
    await pools.delete(name)
    pools.created.remove(name)
    for n in nodes:
        labels, _ = await _node(core, n)
        assert labels.get(c.LABEL_MIG_CONFIG) == "all-1g.5gb", (n, labels)
        assert c.LABEL_NVIDIA_CONFIG not in labels and c.LABEL_POOL not in labels, (n, labels)
    await wait_for(at_1g, what="the nodes back at all-1g.5gb", timeout_s=60)
    data, entries = await _mig_file(core)
    assert config not in entries and {"all-disabled", "all-1g.5gb"} <= set(entries), sorted(entries)
    assert set(data) == {migsim.CHART_KEY}, sorted(data)


async def test_a_mig_pools_two_configs_propagate_side_by_side(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi, mig_configmaps: None
) -> None:
    """A MIG pool needs two configs, the plugin's key and the MIG manager's entry, each given
    configPropagationSeconds to reach its readers' mounted ConfigMap before a node label names it.
    Both are written in the pool's first pass: the MIG manager's entry is there while the plugin's is
    still propagating and no node is labelled yet (written one after the other, the second would
    come only once the first had propagated, a minute here)."""
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    (node,) = await _a100_nodes(fake_nodes, 1, "migkp", np)
    name = f"mig-{np}"
    nvidia = {"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 60}
    await pools.create_pool(name, {POOL_LABEL: np}, nvidia=nvidia)

    async def both_written() -> tuple[set[str], set[str]] | None:
        plugin = await core.read_namespaced_config_map(nv.CONFIGS_CONFIGMAP, nv.NAMESPACE)
        mig = await core.read_namespaced_config_map(c.MIG_CONFIGS_CONFIGMAP, c.MIG_CONFIGS_NAMESPACE)
        ours = (
            {k for k in plugin.data or {} if k.startswith("gpushare-")},
            {k for k in migsim.configs_in(mig.data or {}) if k.startswith("gpushare-mig-")},
        )
        return ours if all(ours) else None

    await wait_for(both_written, what="the plugin's key and the MIG manager's entry written", timeout_s=30)
    labels, _ = await _node(core, node)
    assert c.LABEL_NVIDIA_CONFIG not in labels and not labels.get(c.LABEL_MIG_CONFIG, "").startswith(
        "gpushare-"
    ), labels


async def test_a_node_without_mig_config_is_given_all_disabled_on_delete(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi, mig_configmaps: None
) -> None:
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    (node,) = await _a100_nodes(fake_nodes, 1, "migd", np)
    name = f"mig-{np}"
    await pools.create_pool(
        name, {POOL_LABEL: np}, nvidia={"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0}
    )

    ready = _ready(pools, name)
    await wait_for(ready, what=f"{name} Ready", timeout_s=90)
    assert (await _node(core, node))[1] == MIXED_DEVICES
    await pools.delete(name)
    pools.created.remove(name)
    labels, _ = await _node(core, node)
    assert labels.get(c.LABEL_MIG_CONFIG) == "all-disabled" and c.LABEL_NVIDIA_CONFIG not in labels, labels

    async def whole() -> bool:
        done = await _applied(core, node)
        return done is not None and (done.label, done.state, done.devices) == (
            "all-disabled",
            migsim.SUCCESS,
            ((), ()),
        )

    await wait_for(whole, what=f"{node}'s MIG devices gone (all-disabled)", timeout_s=60)


async def test_a_geometry_change_waits_for_the_running_mig_pod_then_switches(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    operator: OperatorProc,
    pools: PoolApi,
    namespace: str,
    mig_configmaps: None,
) -> None:
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    (node,) = await _a100_nodes(fake_nodes, 1, "migw", np)
    name = f"mig-{np}"
    nvidia = {"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0}
    await pools.create_pool(name, {POOL_LABEL: np}, nvidia=nvidia, rollout={"modeSwitch": "Wait"})

    ready = _ready(pools, name)
    await wait_for(ready, what=f"{name} Ready", timeout_s=90)
    before = (await _node(core, node))[0][c.LABEL_MIG_CONFIG]
    pod = _mig_pod("mig-job", namespace, node, "1g.5gb")
    await core.create_namespaced_pod(namespace, cast(Any, pod))

    async def running() -> bool:
        return bool((await core.read_namespaced_pod("mig-job", namespace)).status.phase == "Running")

    await wait_for(running, what="the MIG pod Running", timeout_s=30)
    await pools.patch_spec(name, {"nvidia": {"mig": {"geometry": [{"profiles": {"1g.5gb": 7}}]}}})

    async def held() -> dict[str, Any] | None:
        found = await _condition(pools, name, "Progressing")
        return found if found.get("reason") == "NodesHeld" else None

    cond = await wait_for(held, what=f"{name} Progressing (NodesHeld)", timeout_s=60)
    assert node in cond["message"] and "mig-job" in cond["message"], cond

    def unchanged(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
        now = labels.get(c.LABEL_MIG_CONFIG)
        return "" if now == before else f"{c.LABEL_MIG_CONFIG} changed to {now} under the running pod"

    await hold_kept(core, node, operator, name, unchanged)
    await core.delete_namespaced_pod("mig-job", namespace, grace_period_seconds=0)

    async def switched() -> migsim.MigState | None:
        done = await _applied(core, node)
        ok = done is not None and done.label != before and done.state == migsim.SUCCESS
        return done if ok else None

    done = await wait_for(switched, what=f"{node} switched to the new geometry", timeout_s=90)
    assert done.devices == ((("1g.5gb", 7),),) * 2
    await wait_for(ready, what=f"{name} Ready again", timeout_s=60)
    assert (await _node(core, node))[1].get("nvidia.com/mig-1g.5gb") == "14"


async def test_a_geometry_the_gpu_cannot_hold_names_the_node_and_failed_and_goes_no_further(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi, mig_configmaps: None
) -> None:
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    nodes = await _a100_nodes(fake_nodes, 2, "migx", np, {c.LABEL_MIG_CONFIG: "all-1g.5gb"})
    seven = ((("1g.5gb", 7),),) * 2

    async def at_1g() -> bool:
        done = [await _applied(core, n) for n in nodes]
        return all(
            d is not None and (d.label, d.state, d.devices) == ("all-1g.5gb", migsim.SUCCESS, seven)
            for d in done
        )

    # The nodes' own config applied first: the failed switch must leave its slices in place.
    await wait_for(at_1g, what="the nodes at all-1g.5gb (7 x 1g.5gb per GPU)", timeout_s=60)
    name = f"mig-{np}"
    # Two 3g.20gb and a 1g.5gb take 9 of an A100-40GB's 8 memory slices.
    too_big = {"geometry": [{"profiles": {"3g.20gb": 2, "1g.5gb": 1}}]}
    await pools.create_pool(
        name,
        {POOL_LABEL: np},
        nvidia={"strategy": "MIG", "mig": too_big, "configPropagationSeconds": 0},
        rollout={"maxUnavailable": 1},
        # Named Failed (the switch not confirmed, saying why) past this, instead of 300 s.
        devicePlugin={"readyTimeoutSeconds": 10},
    )

    async def named() -> tuple[str, dict[str, Any]] | None:
        for n, s in (await _statuses(pools, name)).items():
            if f"{c.LABEL_MIG_CONFIG_STATE}=failed" in s.get("message", "") or "is failed" in s.get(
                "message", ""
            ):
                return n, s
        return None

    failed, status = await wait_for(named, what=f"{name} naming a node's failed MIG config", timeout_s=90)
    assert failed in nodes and status["phase"] != "Ready", status
    done = await _applied(core, failed)
    assert done is not None and done.state == migsim.FAILED and done.reason.startswith("GPU 0: NVIDIA A100")
    assert (await _condition(pools, name, "Ready")).get("status") == "False"
    assert status["phase"] == "Failed" and status["reason"] == "MigConfigFailed", status
    config = (await _node(core, failed))[0][c.LABEL_MIG_CONFIG]
    assert config.startswith("gpushare-mig-") and config in status["message"], (config, status)

    async def degraded() -> dict[str, Any] | None:
        found = await _condition(pools, name, "Degraded")
        return found if found.get("reason") == "MigConfigFailed" else None

    found = await wait_for(degraded, what=f"{name} Degraded (MigConfigFailed)", timeout_s=30)
    assert found["status"] == "True" and failed in found["message"] and config in found["message"], found
    event = await _event(api, name, "MigConfigFailed")
    assert event.type == "Warning" and failed in event.message and config in event.message, event
    # Nothing else changes: the other node keeps its own config, the failed one its old slices.
    (other,) = set(nodes) - {failed}
    labels, _ = await _node(core, other)
    assert labels.get(c.LABEL_MIG_CONFIG) == "all-1g.5gb", labels
    assert done.devices == ((("1g.5gb", 7),),) * 2


async def test_a_stale_success_from_before_the_switch_is_not_taken(
    api: client.ApiClient, fake_nodes: FakeNodeSet, pools: PoolApi, mig_configmaps: None
) -> None:
    """The node carries ``success`` for its own ``all-1g.5gb`` with exactly the devices the pool's
    geometry means (7 x 1g.5gb per GPU); the simulated MIG manager starts on the pool's config only
    seconds after the label changed. Until it has worked on it (``pending``), the pool is not Ready."""
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    (node,) = await _a100_nodes(
        fake_nodes, 1, "migst", np, {c.LABEL_MIG_CONFIG: "all-1g.5gb", c.LABEL_NVIDIA_GPU_COUNT: "2"}
    )
    seven = ((("1g.5gb", 7),),) * 2

    async def at_1g() -> bool:
        done = await _applied(core, node)
        return done is not None and (done.label, done.state, done.devices) == (
            "all-1g.5gb",
            migsim.SUCCESS,
            seven,
        )

    await wait_for(at_1g, what=f"{node} at all-1g.5gb", timeout_s=60)
    await core.patch_node(node, {"metadata": {"annotations": {ANNOTATION_MIG_START: "6"}}})
    name = f"mig-{np}"
    same = {"geometry": [{"profiles": {"1g.5gb": 7}}]}
    await pools.create_pool(
        name, {POOL_LABEL: np}, nvidia={"strategy": "MIG", "mig": same, "configPropagationSeconds": 0}
    )
    samples: list[str] = []

    async def worked() -> migsim.MigState | None:
        # Sampled until the manager has applied the pool's config: never Ready before.
        labels, alloc = await _node(core, node)
        ready = (await _condition(pools, name, "Ready")).get("status")
        done = await _applied(core, node)
        samples.append(
            f"{labels.get(c.LABEL_MIG_CONFIG)} {labels.get(c.LABEL_MIG_CONFIG_STATE)} {alloc} Ready={ready}"
        )
        if done is not None and done.label.startswith("gpushare-mig-") and done.state == migsim.SUCCESS:
            return done
        assert ready != "True", samples
        return None

    await wait_for(worked, what=f"{node} switched by the MIG manager", timeout_s=60)
    # The stale success was there to be taken: labelled with the pool's config, success, the devices.
    assert any(s.startswith("gpushare-mig-") and " success " in s and "Ready=" in s for s in samples), samples

    async def ready() -> dict[str, Any] | None:
        found = await _condition(pools, name, "Ready")
        return found if found.get("status") == "True" else None

    await wait_for(ready, what=f"{name} Ready once the manager applied its config", timeout_s=60)
    record = json.loads((await core.read_node(node)).metadata.annotations["gpushare.io/mig-switch"])
    assert record["seenWorking"] is True and record["config"].startswith("gpushare-mig-"), record


async def test_a_geometry_change_with_evict_evicts_the_mig_pod_within_its_pdb_then_switches(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    operator: OperatorProc,
    pools: PoolApi,
    namespace: str,
    mig_configmaps: None,
) -> None:
    """``modeSwitch: Evict``: the MIG pod is evicted through the Eviction API before the geometry
    changes; while its PodDisruptionBudget allows no disruption the eviction is refused, the pod
    runs on and the node keeps its geometry; once the budget goes, the pod is evicted and the node
    switches, then is uncordoned."""
    np = f"np-mig-{secrets.token_hex(3)}"
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    (node,) = await _a100_nodes(fake_nodes, 1, "mige", np)
    name = f"mig-{np}"
    nvidia = {"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0}
    await pools.create_pool(name, {POOL_LABEL: np}, nvidia=nvidia, rollout={"modeSwitch": "Evict"})

    ready = _ready(pools, name)
    await wait_for(ready, what=f"{name} Ready", timeout_s=90)
    before = (await _node(core, node))[0][c.LABEL_MIG_CONFIG]
    pod = _mig_pod("mig-evictee", namespace, node, "3g.20gb", {"app": "mig-evictee"})
    await core.create_namespaced_pod(namespace, cast(Any, pod))
    pdb = {
        "metadata": {"name": "keep-mig"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "mig-evictee"}}},
    }
    await policy.create_namespaced_pod_disruption_budget(namespace, cast(Any, pdb))

    async def guarded() -> bool:
        running = (await core.read_namespaced_pod("mig-evictee", namespace)).status.phase == "Running"
        budget = await policy.read_namespaced_pod_disruption_budget("keep-mig", namespace)
        return running and budget.status is not None and budget.status.expected_pods == 1

    await wait_for(guarded, what="the MIG pod Running under a budget that allows no disruption", timeout_s=30)
    await pools.patch_spec(name, {"nvidia": {"mig": {"geometry": [{"profiles": {"1g.5gb": 7}}]}}})

    async def blocked() -> bool:
        return operator.sum_metric("gpushare_evictions_total", result="blocked") >= 1

    await wait_for(blocked, what="the eviction refused by the PodDisruptionBudget", timeout_s=60)
    assert (await core.read_namespaced_pod("mig-evictee", namespace)).metadata.deletion_timestamp is None
    labels, _ = await _node(core, node)
    assert labels.get(c.LABEL_MIG_CONFIG) == before, labels
    assert operator.sum_metric("gpushare_evictions_total", result="evicted") == 0

    await policy.delete_namespaced_pod_disruption_budget("keep-mig", namespace)

    async def switched() -> migsim.MigState | None:
        done = await _applied(core, node)
        ok = done is not None and done.label != before and done.state == migsim.SUCCESS
        return done if ok else None

    done = await wait_for(switched, what=f"{node} switched once the pod was evicted", timeout_s=90)
    assert done.devices == ((("1g.5gb", 7),),) * 2
    assert operator.sum_metric("gpushare_evictions_total", result="evicted") >= 1
    pods = await core.list_namespaced_pod(namespace, field_selector="metadata.name=mig-evictee")
    assert all(p.metadata.deletion_timestamp is not None for p in pods.items), "switched under the pod"
    await wait_for(ready, what=f"{name} Ready again", timeout_s=60)
    obj = await core.read_node(node)
    assert not obj.spec.unschedulable and c.ANNOTATION_CORDONED_BY not in (obj.metadata.annotations or {})


class _MigLabelHistory(WatchRecorder):
    """Every value of ``nvidia.com/mig.config`` a watch of the nodes saw, per node, in order: a
    value written twice, or taken away and written again, shows as a repeat."""

    def __init__(self, api: client.ApiClient, nodes: list[str]) -> None:
        super().__init__(client.CoreV1Api(api).list_node)
        self.nodes = set(nodes)
        self.values: dict[str, list[str | None]] = {n: [] for n in nodes}

    def seen(self, node: Any) -> None:
        name = node.metadata.name
        if name in self.nodes:
            value = (node.metadata.labels or {}).get(c.LABEL_MIG_CONFIG)
            if not self.values[name] or self.values[name][-1] != value:
                self.values[name].append(value)


async def test_nodes_move_from_time_slicing_to_mig_through_a_killed_operator_and_back(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
    mig_configmaps: None,
) -> None:
    """Two nodes of a time-slicing pool are moved to a MIG pool (one guarded move between two
    backends); the operator is SIGKILLed right after it wrote the first node's MIG config and a
    new one finishes the move: each node's ``nvidia.com/mig.config`` changes once, to the pool's
    config, and the pool is Ready on the geometry's devices. Moved back, the nodes get
    ``all-disabled`` (they had no MIG config) and the time-slicing config, and advertise
    replicas x GPUs again. Deleting both pools leaves none of their labels but that MIG config."""
    np_ts, np_mig = f"np-ts-{secrets.token_hex(3)}", f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    nodes = await _a100_nodes(fake_nodes, 2, "migmv", np_ts)
    # The manager works 8 s on a config here (a real reconfiguration takes longer): the operator
    # started after the SIGKILL sees it pending, which it must to trust the success that follows.
    for n in nodes:
        await core.patch_node(n, cast(Any, {"metadata": {"annotations": {ANNOTATION_MIG_DELAY: "8"}}}))
    first = start_operator()
    pools = PoolApi(api)
    ts, mig = f"ts-{np_ts}", f"mig-{np_mig}"
    try:
        await pools.create_pool(
            ts,
            {POOL_LABEL: np_ts},
            nvidia={"strategy": "TimeSlicing", "replicas": 4, "configPropagationSeconds": 0},
        )
        await pools.create_pool(
            mig,
            {POOL_LABEL: np_mig},
            nvidia={"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0},
            rollout={"maxUnavailable": 1},
        )

        async def ready(pool: str) -> bool:
            return (await _condition(pools, pool, "Ready")).get("status") == "True"

        async def gpus(n: str) -> str | None:
            return (await core.read_node(n)).status.allocatable.get(c.RES_NVIDIA_GPU)

        async def time_sliced() -> bool:
            return await ready(ts) and all([await gpus(n) == "8" for n in nodes])

        await wait_for(time_sliced, what=f"{ts} Ready, each node 2 GPUs x 4 replicas", timeout_s=90)
        ts_config = (await _node(core, nodes[0]))[0][c.LABEL_NVIDIA_CONFIG]

        async with _MigLabelHistory(api, nodes) as history:
            for n in nodes:
                await core.patch_node(n, cast(Any, {"metadata": {"labels": {POOL_LABEL: np_mig}}}))

            async def one_written() -> bool:
                return any(len(history.values[n]) > 1 for n in nodes)

            await wait_for(
                one_written, what="the first node's MIG config written", timeout_s=60, interval=0.05
            )
            first.kill()
            second = start_operator()

            async def mig_ready() -> bool:
                return await ready(mig) and all([(await _node(core, n))[1] == MIXED_DEVICES for n in nodes])

            await wait_for(mig_ready, what=f"{mig} Ready on the moved nodes", timeout_s=120)
            config = (await _node(core, nodes[0]))[0][c.LABEL_MIG_CONFIG]
            assert config.startswith("gpushare-mig-"), config
            assert history.values == {n: [None, config] for n in nodes}, history.values
        for n in nodes:
            labels, _ = await _node(core, n)
            assert labels.get(c.LABEL_POOL) == mig and labels.get(c.LABEL_NVIDIA_CONFIG) != ts_config, labels

        for n in nodes:
            await core.patch_node(n, cast(Any, {"metadata": {"labels": {POOL_LABEL: np_ts}}}))

        async def back() -> bool:
            done = [await _applied(core, n) for n in nodes]
            return await time_sliced() and all(
                d is not None and (d.label, d.state) == ("all-disabled", migsim.SUCCESS) for d in done
            )

        await wait_for(back, what=f"the nodes back in {ts}, MIG disabled", timeout_s=120)
        for n in nodes:
            labels, alloc = await _node(core, n)
            assert labels.get(c.LABEL_NVIDIA_CONFIG) == ts_config and labels.get(c.LABEL_POOL) == ts, labels
            assert labels.get(c.LABEL_MIG_CONFIG) == "all-disabled" and set(alloc.values()) <= {"0"}, (
                labels,
                alloc,
            )
        for pool in (mig, ts):
            await pools.delete(pool)
        for n in nodes:
            labels, _ = await _node(core, n)
            owned = {k for k in labels if k in (c.LABEL_NVIDIA_CONFIG, c.LABEL_POOL)}
            assert not owned and labels.get(c.LABEL_MIG_CONFIG) == "all-disabled", labels
        assert second.proc.poll() is None
    finally:
        for pool in (mig, ts):
            if await pools.get(pool) is not None:
                await pools.custom.patch_cluster_custom_object(
                    c.GROUP, c.VERSION, c.PLURAL, pool, {"metadata": {"finalizers": None}}, **MERGE
                )  # fmt: skip


async def test_a_switch_finished_while_the_operator_was_down_is_confirmed(
    api: client.ApiClient,
    fake_nodes: FakeNodeSet,
    start_operator: Callable[..., OperatorProc],
    mig_configmaps: None,
) -> None:
    """The operator is SIGKILLed right after it wrote the node's MIG config and started again only
    once the simulated MIG manager reported ``success`` for it: the new operator never sees
    ``pending``, but the node's managedFields say the manager wrote the state label after
    gpushare's record of the switch, so the pool goes Ready with the node confirmed (not named
    MigConfigStuck, as it was when only a ``pending`` the operator saw counted)."""
    np = f"np-mig-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    (node,) = await _a100_nodes(fake_nodes, 1, "migdn", np)
    # The manager works 2 s: its success lands in a later second than the record's time (the
    # patch's, rounded up to the second), as a real reconfiguration's does.
    await core.patch_node(node, cast(Any, {"metadata": {"annotations": {ANNOTATION_MIG_DELAY: "2"}}}))
    first = start_operator()
    pools = PoolApi(api)
    name = f"mig-{np}"
    try:
        await pools.create_pool(
            name, {POOL_LABEL: np}, nvidia={"strategy": "MIG", "mig": MIXED, "configPropagationSeconds": 0}
        )

        async def written() -> str | None:
            value = (await _node(core, node))[0].get(c.LABEL_MIG_CONFIG)
            return value if value is not None and value.startswith("gpushare-mig-") else None

        config = await wait_for(written, what=f"{node}'s MIG config written", timeout_s=30, interval=0.05)
        first.kill()

        async def applied() -> migsim.MigState | None:
            done = await _applied(core, node)
            return done if done is not None and (done.label, done.state) == (config, migsim.SUCCESS) else None

        await wait_for(applied, what=f"the MIG manager's success for {config}", timeout_s=30)
        record = json.loads((await core.read_node(node)).metadata.annotations["gpushare.io/mig-switch"])
        assert record == {"config": config, "since": record["since"], "seenWorking": False}, record
        second = start_operator()
        await wait_for(_ready(pools, name), what=f"{name} Ready after the restart", timeout_s=30)
        assert (await _statuses(pools, name))[node]["phase"] == "Ready"
        assert (await _node(core, node))[1] == MIXED_DEVICES
        record = json.loads((await core.read_node(node)).metadata.annotations["gpushare.io/mig-switch"])
        assert record["seenWorking"] is True and record["config"] == config, record
        assert second.proc.poll() is None
    finally:  # the node is the test's own: the pool goes without restoring it
        if await pools.get(name) is not None:
            await pools.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
            await pools.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )  # fmt: skip
            await pools.delete(name, timeout_s=30)
