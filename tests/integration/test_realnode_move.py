"""The real node moving between an ACK pool and an NVIDIA pool, and back (issue 36).

The module's own control plane has one real node, ``realnode-0``, and both device plugins, each
DaemonSet selecting its nodes as a real deployment does and stepping aside for the other backend's
pools (docs/concepts/backends.md, "Which plugin runs on a node"):

* the stand-in of ACK's plugin (``realnode/deviceplugin``) on ``gpushare=true``, but not on a node
  that names an NVIDIA config (``nvidia.com/device-plugin.config``);
* NVIDIA's real plugin and config-manager over the project's fake ``libnvidia-ml.so.1`` (2 GPUs)
  on ``nvidia.com/gpu.present=true``, but not on a node of an ACK pool (``cgpu=true``).

The node carries both selectors (a GPU node of a cluster with both stacks). Its pool membership
follows its ``alibabacloud.com/nodepool-id``: ``np-ack`` (an ACK pool) or ``np-nv`` (an NVIDIA
time-slicing pool). The operator moves it with one guarded label patch: the old backend's labels
restored, the new one's written; the plugins follow that patch through their DaemonSets.

Marked ``realnode``: ``make test REAL_NODES=0`` deselects it; without root or cgroups, or without
``make nvidia-plugin fake-nvml``, it FAILS, never skips.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster, wait_for
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import (
    PLUGIN_NODE_SELECTOR,
    POOL_LABEL,
    RealNodePlugin,
    ensure_device_plugin_daemonset,
    plugin_pods_on,
    pod_running_and_ready,
)
from gpushare.devcluster.realnode import IMAGE_WORKLOAD
from gpushare.k8s.client import make_api_client
from support.cluster import serve
from support.holds import hold_kept
from support.namespaces import fresh_namespace
from support.operator_proc import OperatorProc, launch_operator
from support.pools import PoolApi
from support.realnode_nvidia import require_nvidia_real_node

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]
NODE = "realnode-0"
GPUS = nv.DEFAULT_GPUS
#: The fake library's GPUs (A100-SXM4-40GB): ACK's stand-in is given the same ones.
GPU_MEMORY_MIB = 40 * 1024
NP_ACK, NP_NV = "np-ack", "np-nv"
REPLICAS = 4
#: A placement the node has before any pool: leaving the ACK pool must put it back.
PRIOR_PLACEMENT = "spread"
#: A plugin (re)start, a registration and a kubelet status sync (10 s), on 2 shared CPUs.
WAIT = 180.0
POOL_WAIT = WAIT + 120.0
ACK_LABELS = (c.LABEL_CGPU, c.LABEL_DISABLE_ISOLATION, c.LABEL_SCHEDULE, c.LABEL_PLACEMENT)


@pytest.fixture(scope="module")
def move_cluster() -> Iterator[ClusterInfo]:
    require_nvidia_real_node()
    dev = DevCluster(real_nodes=1)

    async def prepare(info: ClusterInfo) -> None:
        api = await make_api_client(str(info.kubeconfig))
        async with api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
            await ensure_device_plugin_daemonset(
                api,
                real_nodes=RealNodePlugin(
                    api_port=info.ports["kube-apiserver"], gpus=GPUS, gpu_memory_mib=GPU_MEMORY_MIB
                ),
            )
            await nv.install(api, dev, {})
            # ACK's plugin only, until the ACK pool has the node (nvidia.com/gpu.present comes then).
            labels = {**PLUGIN_NODE_SELECTOR, POOL_LABEL: NP_ACK, c.LABEL_PLACEMENT: PRIOR_PLACEMENT}
            await client.CoreV1Api(api).patch_node(NODE, {"metadata": {"labels": labels}})
            await wait_for(
                lambda: _plugin_ready(api, "ack"), what=f"ACK's plugin Ready on {NODE}", timeout_s=WAIT
            )

    yield from serve(dev, prepare, "control plane with a real node and both device plugins")


@pytest.fixture
async def mapi(move_cluster: ClusterInfo) -> AsyncIterator[client.ApiClient]:
    api = await make_api_client(str(move_cluster.kubeconfig))
    async with api:
        yield api


@pytest.fixture
def operator(move_cluster: ClusterInfo, tmp_path: Path) -> Iterator[OperatorProc]:
    op = launch_operator(move_cluster.kubeconfig, tmp_path / "operator.log")
    op.wait_serving()
    yield op
    op.stop()


@pytest.fixture
async def pools(mapi: client.ApiClient) -> AsyncIterator[PoolApi]:
    api = PoolApi(mapi)
    yield api
    for name in api.created:
        await api.delete(name)


@pytest.fixture
async def ns(mapi: client.ApiClient) -> AsyncIterator[str]:
    async with fresh_namespace(mapi, "mv") as name:
        yield name


async def _plugin_pods(api: client.ApiClient, backend: str) -> list[Any]:
    """The plugin pods of ``backend`` ("ack" or "nvidia") on the node, those being deleted left out."""
    pods = await (plugin_pods_on(api, NODE) if backend == "ack" else nv.plugin_pods_on(api, NODE))
    return [p for p in pods if p.metadata.deletion_timestamp is None]


async def _plugin_ready(api: client.ApiClient, backend: str) -> bool:
    return any(pod_running_and_ready(p) for p in await _plugin_pods(api, backend))


async def only_plugin(api: client.ApiClient, backend: str) -> None:
    """Wait until ``backend``'s plugin runs Ready on the node and the other one's has no pod there."""
    other = "nvidia" if backend == "ack" else "ack"

    async def check() -> bool:
        return await _plugin_ready(api, backend) and not await _plugin_pods(api, other)

    await wait_for(check, what=f"only {backend}'s device plugin on {NODE}", timeout_s=WAIT)


async def _labels(core: client.CoreV1Api) -> dict[str, str]:
    node = await core.read_node(NODE)
    return dict(node.metadata.labels or {})


async def _allocatable(core: client.CoreV1Api, resource: str) -> str | None:
    node = await core.read_node(NODE)
    value: str | None = (node.status.allocatable or {}).get(resource)
    return value


def _condition(pool: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conds = ((pool or {}).get("status") or {}).get("conditions") or []
    return next((cond for cond in conds if cond.get("type") == kind), {})


async def ready_with(
    core: client.CoreV1Api, pools: PoolApi, name: str, resource: str, count: int
) -> dict[str, Any]:
    """Wait until pool ``name`` is Ready (for its current generation) with the node advertising
    ``count`` of ``resource``; returns the pool."""

    async def ready() -> dict[str, Any] | None:
        pool = await pools.get(name)
        cond = _condition(pool, "Ready")
        if cond.get("status") != "True" or cond.get("observedGeneration") != (pool or {})["metadata"].get(
            "generation"
        ):
            return None
        return pool if await _allocatable(core, resource) == str(count) else None

    found: dict[str, Any] = await wait_for(
        ready, what=f"pool {name} Ready with {NODE} advertising {resource}: {count}", timeout_s=POOL_WAIT
    )
    return found


def workload_pod(name: str, limits: dict[str, str], *args: str) -> dict[str, Any]:
    """A pod of the workload image (it prints its environment) on the real node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {c.LABEL_HOSTNAME: NODE},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_WORKLOAD,
                    "imagePullPolicy": "Never",
                    "args": list(args),
                    "resources": {"limits": {"cpu": "100m", "memory": "32Mi", **limits}},
                }
            ],
        },
    }


async def run_to_completion(
    core: client.CoreV1Api, ns: str, name: str, limits: dict[str, str]
) -> dict[str, str]:
    """Run a workload pod to its end on the real node; the environment it printed. A pod the
    kubelet refused at admission (NVIDIA's plugin registers several times as its pod starts: a pod
    bound meanwhile gets "no healthy devices", docs/concepts/backends.md) is made again, twice at
    most; any other failure fails the test."""
    for attempt in range(3):
        pod_name = f"{name}-{attempt}"
        await core.create_namespaced_pod(ns, cast(Any, workload_pod(pod_name, limits)))

        async def finished(pod_name: str = pod_name) -> Any:
            pod = await core.read_namespaced_pod(pod_name, ns)
            return pod if pod.status.phase in ("Succeeded", "Failed") else None

        pod = await wait_for(finished, what=f"pod {ns}/{pod_name} to run on {NODE}", timeout_s=WAIT)
        if pod.status.phase == "Failed" and pod.status.reason == "UnexpectedAdmissionError" and attempt < 2:
            continue
        assert pod.status.phase == "Succeeded", pod.status
        log: str = await core.read_namespaced_pod_log(pod_name, ns)
        return dict(line[4:].partition("=")[::2] for line in log.splitlines() if line.startswith("env "))
    raise AssertionError("unreachable")


async def test_the_real_node_moves_from_an_ack_pool_to_an_nvidia_pool_and_back(
    mapi: client.ApiClient, ns: str, operator: OperatorProc, pools: PoolApi
) -> None:
    core = client.CoreV1Api(mapi)
    prior = {key: (await _labels(core)).get(key) for key in ACK_LABELS}
    assert prior == {
        c.LABEL_CGPU: None,
        c.LABEL_DISABLE_ISOLATION: None,
        c.LABEL_SCHEDULE: None,
        c.LABEL_PLACEMENT: PRIOR_PLACEMENT,
    }, prior
    gpu_mem = str(GPUS * (GPU_MEMORY_MIB // 1024))

    # The node in an ACK pool (cgpu, binpack): ACK's labels, ACK's plugin advertising gpu-mem.
    await pools.create_pool("ack", {POOL_LABEL: NP_ACK})
    # The NVIDIA pool exists before the node moves; its nodes wait for running GPU pods.
    # configPropagationSeconds short: NVIDIA's plugin pod on this node is created only after the
    # label is written (its DaemonSet selects the node only then), so it mounts the config at start.
    nvidia = {"strategy": "TimeSlicing", "replicas": REPLICAS, "configPropagationSeconds": 5}
    await pools.create_pool("nv", {POOL_LABEL: NP_NV}, nvidia=nvidia, rollout={"modeSwitch": "Wait"})
    await ready_with(core, pools, "ack", c.RES_GPU_MEM, int(gpu_mem))
    # GPU Feature Discovery's label, as on any GPU node: NVIDIA's plugin stays off an ACK pool's node.
    await core.patch_node(NODE, {"metadata": {"labels": dict(nv.NODE_SELECTOR)}})
    await only_plugin(mapi, "ack")

    # A pod holding ACK's gpu-mem holds the move.
    await core.create_namespaced_pod(
        ns, cast(Any, workload_pod("holder", {c.RES_GPU_MEM: "2"}, "--sleep", "900"))
    )

    async def holder_running() -> bool:
        pod = await core.read_namespaced_pod("holder", ns)
        return bool(pod.status.phase == "Running")

    await wait_for(holder_running, what=f"pod {ns}/holder to run", timeout_s=WAIT)

    # Move: the node's node pool changes; the NVIDIA pool selects it now, the ACK pool no longer.
    await core.patch_node(NODE, {"metadata": {"labels": {POOL_LABEL: NP_NV}}})

    async def held() -> dict[str, Any] | None:
        pool = await pools.get("nv")
        for shown in ((pool or {}).get("status") or {}).get("nodeStatuses") or []:
            if shown.get("name") == NODE and shown.get("phase") == "Held":
                return dict(shown)
        return None

    shown = await wait_for(held, what=f"{NODE}'s move held by the running gpu-mem pod", timeout_s=POOL_WAIT)
    assert f"{ns}/holder" in shown["message"], shown

    # The hold as the node shows it, over the next passes: still ACK's labels, no NVIDIA config,
    # still advertising ACK's gpu-mem (a hold dropped on the next pass is seen here).
    def still_ack(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
        if labels.get(c.LABEL_CGPU) != "true" or c.LABEL_NVIDIA_CONFIG in labels:
            return f"labels moved under the running pod: {dict(labels)}"
        if allocatable.get(c.RES_GPU_MEM) != gpu_mem:
            return f"advertises {c.RES_GPU_MEM}: {allocatable.get(c.RES_GPU_MEM)}, not {gpu_mem}"
        return ""

    await hold_kept(core, NODE, operator, "nv", still_ack)
    assert await _plugin_ready(mapi, "ack") and not await _plugin_pods(mapi, "nvidia")
    assert (await held()) is not None, "the pool no longer says the move is held"

    # The pod ends: the node leaves ACK (its labels as before the ACK pool) and enters NVIDIA.
    await core.delete_namespaced_pod("holder", ns, grace_period_seconds=0)
    pool = await ready_with(core, pools, "nv", nv.RESOURCE, REPLICAS * GPUS)
    config = pool["status"]["schedule"]
    assert pool["status"]["backend"] == "nvidia" and config.startswith(f"gpushare-ts{REPLICAS}-"), pool[
        "status"
    ]
    labels = await _labels(core)
    assert {key: labels.get(key) for key in ACK_LABELS} == {**prior, c.LABEL_SCHEDULE: c.SCHEDULE_DEFAULT}, (
        labels
    )
    assert labels[nv.CONFIG_LABEL] == config and labels[c.LABEL_POOL] == "nv", labels
    await only_plugin(mapi, "nvidia")
    env = await run_to_completion(core, ns, "nv-job", {nv.RESOURCE: "1"})
    assert env.get("NVIDIA_VISIBLE_DEVICES") in {nv.default_uuid(i) for i in range(GPUS)}, env
    assert "ALIYUN_COM_GPU_MEM_IDX" not in env, env

    # And back: NVIDIA's config label removed (the node had none), ACK's labels and plugin back.
    await core.patch_node(NODE, {"metadata": {"labels": {POOL_LABEL: NP_ACK}}})
    pool = await ready_with(core, pools, "ack", c.RES_GPU_MEM, int(gpu_mem))
    labels = await _labels(core)
    assert nv.CONFIG_LABEL not in labels, labels
    assert {key: labels.get(key) for key in ACK_LABELS} == {
        c.LABEL_CGPU: "true",
        c.LABEL_DISABLE_ISOLATION: "false",
        c.LABEL_SCHEDULE: "cgpu",
        c.LABEL_PLACEMENT: "binpack",
    }, labels
    assert labels[c.LABEL_POOL] == "ack", labels
    await only_plugin(mapi, "ack")
    env = await run_to_completion(core, ns, "ack-job", {c.RES_GPU_MEM: "4"})
    assert env.get("ALIYUN_COM_GPU_MEM_CONTAINER") == "4", env
    assert env.get("ALIYUN_COM_GPU_MEM_DEV") == str(GPU_MEMORY_MIB // 1024), env
