"""The operator against a real kubelet node (the real-node tier, issue 20).

The module's own control plane has one real node, ``realnode-0`` (a kubelet v1.34 with containerd
and runc: ``gpushare.devcluster.realnode``), in node pool ``np-real``; the stand-in device-plugin
DaemonSet runs the project's device plugin there (``realnode/deviceplugin``: the kubelet's
device-plugin API, ACK's environment). Pods are real containers of the locally built workload
image, which prints its environment. Everything here is marked ``realnode``:
``make test REAL_NODES=0`` deselects it and says so; without root or cgroups it FAILS, never skips.

The last test reads the alerts back from a live Prometheus (Debian's ``prometheus``, the shipped rule
groups) that scrapes the module's operator: the degraded-pool alert while the plugin is kept off the
real node (issue 38).

The tests share the node but not their fate: each one's setup (``pools``) resets the node to a
known state, whatever an earlier test left (a failure half-way, a ``restart: Never`` pool): no
pool, the default mode's labels, no test annotations, schedulable, and a Ready plugin pod that
advertises the default mode (restarted when it does not). Each test deletes its pools at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.devcluster import (
    BinariesMissing,
    ClusterInfo,
    DevCluster,
    find_binaries,
    wait_for,
)
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.fakes import (
    PLUGIN_NODE_SELECTOR,
    POOL_LABEL,
    RealNodePlugin,
    ensure_device_plugin_daemonset,
    plugin_pods_on,
    pod_running_and_ready,
)
from gpushare.devcluster.pluginsim import ANNOTATION_HANG
from gpushare.devcluster.prometheus import Prometheus, PrometheusMissing, rule_file
from gpushare.devcluster.realnode import IMAGE_WORKLOAD, RealNodeUnavailable, preflight
from gpushare.k8s.client import make_api_client
from support.alerts import Scenario, report
from support.cluster import serve
from support.namespaces import fresh_namespace
from support.operator_proc import OperatorProc, launch_operator
from support.pools import PoolApi

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]
NODE = "realnode-0"
NODEPOOL = "np-real"
GPU_MEM_GIB = 16
#: Generous: a plugin restart is a pod deletion, a DaemonSet recreation, a registration and a kubelet
#: status sync (10 s) on a 2-CPU machine shared with other tests.
WAIT = 180.0


async def _prepare(info: ClusterInfo) -> None:
    api = await make_api_client(str(info.kubeconfig))
    async with api:
        await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
        await ensure_device_plugin_daemonset(
            api,
            real_nodes=RealNodePlugin(
                api_port=info.ports["kube-apiserver"], gpu_memory_mib=GPU_MEM_GIB * 1024
            ),
        )
        core = client.CoreV1Api(api)
        await core.patch_node(NODE, {"metadata": {"labels": {"gpushare": "true", POOL_LABEL: NODEPOOL}}})
        await wait_for(
            lambda: _advertised(core, "nvidia.com/gpu", "1"),
            what="the plugin in default mode",
            timeout_s=WAIT,
        )


async def _advertised(core: client.CoreV1Api, resource: str, value: str) -> bool:
    node = await core.read_node(NODE)
    return bool((node.status.allocatable or {}).get(resource) == value)


@pytest.fixture(scope="module")
def real_cluster() -> Iterator[ClusterInfo]:
    try:
        find_binaries()
        preflight(1)
    except (BinariesMissing, RealNodeUnavailable) as exc:
        pytest.fail(f"real-node tier cannot run: {exc}", pytrace=False)
    yield from serve(DevCluster(real_nodes=1), _prepare, "control plane with a real node")


@pytest.fixture(scope="module")
def real_operator(
    real_cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProc]:
    op = launch_operator(real_cluster.kubeconfig, tmp_path_factory.mktemp("realnode") / "operator.log")
    op.wait_serving()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def real_prometheus(
    real_operator: OperatorProc, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    """A real Prometheus with the shipped rule groups scraping the module's operator every second
    (its metrics endpoint only: this ``gpushare run`` serves no webhook)."""
    try:
        prom = Prometheus.start(
            tmp_path_factory.mktemp("prometheus"),
            free_port(),
            [f"127.0.0.1:{real_operator.metrics_port}"],
            webhooks=[],
        )
    except PrometheusMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    yield prom
    prom.stop()


@pytest.fixture
async def rapi(real_cluster: ClusterInfo, real_operator: OperatorProc) -> AsyncIterator[client.ApiClient]:
    api = await make_api_client(str(real_cluster.kubeconfig))
    async with api:
        yield api


@pytest.fixture
async def ns(rapi: client.ApiClient) -> AsyncIterator[str]:
    async with fresh_namespace(rapi, "rn") as name:
        yield name


class Pools(PoolApi):
    """Create, change and delete pools over the real node; every pool is deleted at the end."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.core = client.CoreV1Api(api)

    async def create(self, name: str, **spec: Any) -> None:
        await self.create_pool(name, {POOL_LABEL: NODEPOOL}, **spec)

    async def wait_ready(self, name: str, status: str = "True") -> dict[str, Any]:
        """Until the pool's Ready condition is ``status`` for its current generation; returns the pool."""

        async def check() -> dict[str, Any] | None:
            obj = await self.get(name)
            if obj is None:
                return None
            gen = obj["metadata"].get("generation")
            st = obj.get("status") or {}
            for cond in st.get("conditions") or []:
                if (
                    cond["type"] == "Ready"
                    and cond["status"] == status
                    and cond.get("observedGeneration") == gen
                ):
                    return obj
            return None

        result: dict[str, Any] = await wait_for(check, what=f"pool {name} Ready={status}", timeout_s=WAIT)
        return result

    async def wait_node_reason(self, name: str, reason: str) -> dict[str, Any]:
        """Until the pool's status names the real node with ``reason``; returns that node status."""

        async def check() -> dict[str, Any] | None:
            obj = await self.get(name)
            for s in ((obj or {}).get("status") or {}).get("nodeStatuses") or []:
                if s.get("name") == NODE and s.get("reason") == reason:
                    return dict(s)
            return None

        result: dict[str, Any] = await wait_for(
            check, what=f"pool {name} to report {NODE} {reason}", timeout_s=WAIT
        )
        return result

    async def delete_all(self) -> None:
        for name in self.created:
            with _ignore_404():
                await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        for name in self.created:

            async def gone(name: str = name) -> bool:
                return await self.get(name) is None

            await wait_for(gone, what=f"pool {name} deleted (its cleanup done)", timeout_s=WAIT)


class _ignore_404:
    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        return isinstance(exc, ApiException) and exc.status == 404


async def _in_default_mode(core: client.CoreV1Api) -> bool:
    _, alloc = await node_status(core)
    return alloc.get("nvidia.com/gpu") == "1" and alloc.get(c.RES_GPU_MEM, "0") == "0"


async def reset_node(api: client.ApiClient) -> None:
    """The real node as every test starts: no GPUSharePool, none of the operator's labels, no loan
    or hang annotation, the plugin DaemonSet's nodeSelector label, schedulable, and a Ready plugin
    pod advertising the default mode (the plugin is restarted when it advertises anything else,
    e.g. after a ``restart: Never`` pool)."""
    core = client.CoreV1Api(api)
    helper = PoolApi(api)
    left = await helper.custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL)
    for item in left.get("items") or []:
        name = item["metadata"]["name"]
        helper.created.append(name)
        with _ignore_404():
            await helper.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
    for name in helper.created:

        async def gone(name: str = name) -> bool:
            return await helper.get(name) is None

        await wait_for(gone, what=f"pool {name}, left by an earlier test, deleted", timeout_s=WAIT)
    patch: dict[str, Any] = {
        "metadata": {
            "labels": dict.fromkeys(c.MANAGED_LABELS) | {POOL_LABEL: NODEPOOL} | PLUGIN_NODE_SELECTOR,
            "annotations": {ANNOTATION_HANG: None, c.ANNOTATION_LOAN: None},
        },
        "spec": {"unschedulable": None},
    }
    await core.patch_node(NODE, patch)
    if not await _in_default_mode(core):
        for pod in await plugin_pods_on(api, NODE):
            with _ignore_404():
                await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    await wait_for(lambda: _in_default_mode(core), what=f"{NODE} in default mode", timeout_s=WAIT)
    await plugin_pod(api)


@pytest.fixture
async def pools(rapi: client.ApiClient) -> AsyncIterator[Pools]:
    await reset_node(rapi)
    helper = Pools(rapi)
    yield helper
    core = client.CoreV1Api(rapi)
    await core.patch_node(NODE, {"metadata": {"annotations": {ANNOTATION_HANG: None}}})
    await helper.delete_all()


async def node_status(core: client.CoreV1Api) -> tuple[dict[str, str], dict[str, str]]:
    node = await core.read_node(NODE)
    return dict(node.status.capacity or {}), dict(node.status.allocatable or {})


async def plugin_pod(api: client.ApiClient, other_than: str = "") -> Any:
    """The Running, Ready plugin pod on the real node (with another uid than ``other_than``)."""

    async def ready() -> Any:
        for pod in await plugin_pods_on(api, NODE):
            if pod.metadata.uid != other_than and pod_running_and_ready(pod):
                return pod
        return None

    return await wait_for(ready, what=f"a Ready device plugin pod on {NODE}", timeout_s=WAIT)


def host_python_mounts() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Volumes, mounts and the interpreter that run this very gpushare in a container of the workload
    image (which has no Python): the host's /usr, this Python and the repository (the editable
    install), read-only at the same paths. The image links /lib and /lib64 into /usr."""
    paths = [Path("/usr"), Path(sys.base_prefix).resolve(), REPO]
    if not Path(sys.prefix).resolve().is_relative_to(REPO):
        paths.append(Path(sys.prefix).resolve())
    volumes = [{"name": f"host-{i}", "hostPath": {"path": str(p)}} for i, p in enumerate(paths)]
    mounts = [{"name": f"host-{i}", "mountPath": str(p), "readOnly": True} for i, p in enumerate(paths)]
    return volumes, mounts, str(Path(sys.prefix) / "bin" / "python")


def quota_output(log: str) -> dict[str, Any]:
    """The JSON ``gpushare quota -o json`` printed after the workload's env lines."""
    start = log.index("\n{") + 1
    end = log.index("\n}", start) + 2
    out: dict[str, Any] = json.loads(log[start:end])
    return out


async def run_job(
    api: client.ApiClient, ns: str, name: str, limits: dict[str, str], *, quota: bool = False
) -> str:
    """Run a Job of the workload image on the real node to completion; returns its pod's log.

    ``quota``: the container also runs ``gpushare quota -o json`` (see :func:`host_python_mounts`)."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    container: dict[str, Any] = {
        "name": "main",
        "image": IMAGE_WORKLOAD,
        "imagePullPolicy": "Never",
        "resources": {"limits": {"cpu": "100m", "memory": "32Mi", **limits}},
    }
    volumes: list[dict[str, Any]] = []
    if quota:
        volumes, mounts, python = host_python_mounts()
        container["args"] = ["--", python, "-m", "gpushare", "quota", "-o", "json"]
        container["volumeMounts"] = mounts
        container["resources"]["limits"] |= {"cpu": "500m", "memory": "256Mi"}
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {POOL_LABEL: NODEPOOL},
                    "containers": [container],
                    "volumes": volumes,
                }
            },
        },
    }
    await batch.create_namespaced_job(ns, cast(Any, body))

    async def done() -> Any:
        job = await batch.read_namespaced_job(name, ns)
        if job.status.failed:
            raise AssertionError(f"job {ns}/{name} failed: {job.status}")
        return job if job.status.succeeded else None

    await wait_for(done, what=f"job {ns}/{name} to complete on {NODE}", timeout_s=WAIT)
    pods = await core.list_namespaced_pod(ns, label_selector=f"job-name={name}")
    assert len(pods.items) == 1, [p.metadata.name for p in pods.items]
    pod = pods.items[0]
    assert pod.spec.node_name == NODE
    log: str = await core.read_namespaced_pod_log(pod.metadata.name, ns)
    return log


def env_of(log: str) -> dict[str, str]:
    out = {}
    for line in log.splitlines():
        if line.startswith("env "):
            key, _, value = line[4:].partition("=")
            out[key] = value
    return out


async def test_rolling_switch_cgpu_to_core_mem_then_a_core_job_gets_acks_env(
    rapi: client.ApiClient, pools: Pools, ns: str
) -> None:
    core = client.CoreV1Api(rapi)
    await pools.create("rn-switch", memoryIsolation=True, devicePlugin={"restart": "Rolling"})
    await pools.wait_ready("rn-switch")
    _, alloc = await node_status(core)
    assert alloc[c.RES_GPU_MEM] == str(GPU_MEM_GIB)
    assert alloc[c.RES_GPU_CORE] == "0"
    old = (await plugin_pod(rapi)).metadata.uid

    # Sampled from before the switch until the pool is Ready again: whether the pool says Ready for
    # the switched spec (read first), then gpu-core.percentage, then every plugin pod on the node.
    # The node advertises gpu-core only from a plugin pod started after the switch (the stand-in
    # plugin, as ACK's, reads its labels only at start, and the DaemonSet makes no new pod while
    # the old one exists), so what a sample can catch is the operator's side: the pool called
    # Ready for the new mode before the node advertises it, or the switch made without restarting
    # the plugin (gpu-core never comes, or comes with the old pod still the node's plugin).
    samples: list[tuple[bool, int, set[str]]] = []
    stop = asyncio.Event()
    switched: list[int] = []

    async def sample() -> None:
        while not stop.is_set():
            pool = await pools.get("rn-switch") or {}
            ready = bool(switched) and any(
                cond.get("type") == "Ready"
                and cond.get("status") == "True"
                and cond.get("observedGeneration") == switched[0]
                for cond in (pool.get("status") or {}).get("conditions") or []
            )
            _, alloc = await node_status(core)
            pods = await plugin_pods_on(rapi, NODE)
            samples.append((ready, int(alloc.get(c.RES_GPU_CORE, "0")), {p.metadata.uid for p in pods}))
            await asyncio.sleep(0.2)

    async def more_than(n: int) -> bool:
        return len(samples) > n

    sampler = asyncio.create_task(sample())
    try:
        await wait_for(lambda: more_than(0), what="a first sample", timeout_s=WAIT)
        patched = await pools.patch_spec("rn-switch", {"computeAllocation": True})
        switched.append(patched["metadata"]["generation"])
        await wait_for(
            lambda: _advertised(core, c.RES_GPU_CORE, "100"), what="gpu-core advertised", timeout_s=WAIT
        )
        await pools.wait_ready("rn-switch")
        n = len(samples)
        await wait_for(lambda: more_than(n), what="a sample after Ready", timeout_s=WAIT)
    finally:
        stop.set()
        await sampler
    # Ready for the switched spec only once the node advertises it: every sample that read the pool
    # Ready then read gpu-core advertised (the node, read after the pool, never goes back).
    early = [i for i, (ready, value, _) in enumerate(samples) if ready and value == 0]
    assert not early, ("the pool said Ready before the node advertised gpu-core", samples[: early[0] + 2])
    assert any(ready for ready, _, _ in samples), samples[-3:]
    # Before the switch the old plugin pod serves gpu-mem alone; the operator replaced it.
    advertised = [uids for _, value, uids in samples if value > 0]
    assert advertised and samples[0][1] == 0 and old in samples[0][2], samples[:3]
    assert (await plugin_pod(rapi)).metadata.uid != old
    print(f"rolling switch: {len(samples)} samples, {len(advertised)} with gpu-core advertised")

    log = await run_job(rapi, ns, "core-job", {c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}, quota=True)
    env = env_of(log)
    assert env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "4", log
    assert env["ALIYUN_COM_GPU_MEM_DEV"] == str(GPU_MEM_GIB), log
    assert env["ALIYUN_COM_GPU_MEM_POD"] == "4", log
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "0", log
    assert "CGPU_DISABLE" not in env, log
    # `gpushare quota` inside that container sizes it from the plugin's env: 4 of 16 GiB.
    quota = quota_output(log)
    assert (quota["container"], quota["device"], quota["pod"], quota["index"]) == (4, GPU_MEM_GIB, 4, 0), log
    assert quota["fraction"] == 0.25, log
    assert quota["cgpuDisabled"] is False, log
    print(f"gpushare quota in the core Job's container: {json.dumps(quota)}")


async def test_restart_never_keeps_the_old_mode_and_the_pool_names_the_node(
    rapi: client.ApiClient, pools: Pools
) -> None:
    core = client.CoreV1Api(rapi)
    before = (await plugin_pod(rapi)).metadata.uid
    await pools.create("rn-never", memoryIsolation=True, devicePlugin={"restart": "Never"})
    status = await pools.wait_node_reason("rn-never", "PluginRestartNeeded")
    assert status["phase"] == "Degraded", status
    pool = await pools.wait_ready("rn-never", "False")
    ready = next(x for x in pool["status"]["conditions"] if x["type"] == "Ready")
    assert NODE in ready["message"], ready
    # Labelled cgpu, but the plugin was not restarted: the real kubelet still advertises default mode.
    node = await core.read_node(NODE)
    assert node.metadata.labels[c.LABEL_SCHEDULE] == "cgpu"
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    assert node.status.allocatable[c.RES_GPU_MEM] == "0"
    assert (await plugin_pod(rapi)).metadata.uid == before
    # Restarting the plugin by hand is what the pool asks for; then the node is Ready.
    pod = (await plugin_pods_on(rapi, NODE))[0]
    await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    await wait_for(lambda: _advertised(core, c.RES_GPU_MEM, str(GPU_MEM_GIB)), what="gpu-mem", timeout_s=WAIT)
    await pools.wait_ready("rn-never")
    # Deleting a Never pool restores the labels but, again, restarts nothing: the user does.
    await pools.delete_all()
    pod = await plugin_pod(rapi)
    await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)


async def test_a_no_isolation_pool_gives_containers_cgpu_disable(
    rapi: client.ApiClient, pools: Pools, ns: str
) -> None:
    await pools.create("rn-share", memoryIsolation=False)
    await pools.wait_ready("rn-share")
    node = await client.CoreV1Api(rapi).read_node(NODE)
    assert node.metadata.labels[c.LABEL_DISABLE_ISOLATION] == "true"
    env = env_of(await run_job(rapi, ns, "share-job", {c.RES_GPU_MEM: "3"}))
    assert env["CGPU_DISABLE"] == "true", env
    assert env["ALIYUN_COM_GPU_MEM_CONTAINER"] == "3", env
    assert env["ALIYUN_COM_GPU_MEM_DEV"] == str(GPU_MEM_GIB), env


async def test_plugin_pod_deleted_by_hand_the_node_leaves_ready_until_it_registers(
    rapi: client.ApiClient, pools: Pools, ns: str
) -> None:
    core = client.CoreV1Api(rapi)
    # Within readyTimeoutSeconds of its label change a node that does not advertise its mode is
    # "restart in progress" (PluginModePending); a short window lets this test see what comes after.
    await pools.create("rn-gone", memoryIsolation=True, devicePlugin={"readyTimeoutSeconds": 15})
    await pools.wait_ready("rn-gone")
    # The next plugin pod runs but does not register (a plugin that does not come back yet).
    await core.patch_node(NODE, {"metadata": {"annotations": {ANNOTATION_HANG: "true"}}})
    pod = await plugin_pod(rapi)
    await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)

    async def unhealthy() -> bool:
        capacity, alloc = await node_status(core)
        return capacity.get(c.RES_GPU_MEM) == str(GPU_MEM_GIB) and alloc.get(c.RES_GPU_MEM) == "0"

    # The real kubelet: capacity stays, allocatable drops to 0.
    await wait_for(unhealthy, what="gpu-mem capacity 16, allocatable 0", timeout_s=WAIT)
    status = await pools.wait_node_reason("rn-gone", "PluginNotRegistered")
    assert status["phase"] == "Degraded", status
    assert "not registered" in status["message"], status
    pool = await pools.wait_ready("rn-gone", "False")
    ready = next(x for x in pool["status"]["conditions"] if x["type"] == "Ready")
    assert f"device plugin not registered on {NODE}" in ready["message"], ready

    # A GPU pod bound to the node meanwhile is refused by the kubelet's admission.
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound-in-window"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_WORKLOAD,
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {c.RES_GPU_MEM: "2"}},
                }
            ],
        },
    }
    await core.create_namespaced_pod(ns, cast(Any, body))

    async def refused() -> Any:
        p = await core.read_namespaced_pod("bound-in-window", ns)
        return p if p.status.phase == "Failed" else None

    failed = await wait_for(refused, what="the kubelet to refuse the GPU pod", timeout_s=WAIT)
    assert failed.status.reason == "UnexpectedAdmissionError", failed.status

    # ... and the pool reports it, not hidden.
    async def reported() -> dict[str, Any] | None:
        obj = await pools.get("rn-gone")
        conds = {x["type"]: x for x in ((obj or {}).get("status") or {}).get("conditions") or []}
        degraded = conds.get("Degraded") or {}
        if f"{ns}/bound-in-window on {NODE}" in degraded.get("message", ""):
            return degraded
        return None

    degraded = await wait_for(reported, what="the pool to name the refused pod", timeout_s=WAIT)
    assert degraded["reason"] == "PluginNotRegistered", degraded

    await core.patch_node(NODE, {"metadata": {"annotations": {ANNOTATION_HANG: None}}})
    await wait_for(
        lambda: _advertised(core, c.RES_GPU_MEM, str(GPU_MEM_GIB)), what="gpu-mem back", timeout_s=WAIT
    )
    pool = await pools.wait_ready("rn-gone")
    ready = next(x for x in pool["status"]["conditions"] if x["type"] == "Ready")
    assert f"{ns}/bound-in-window on {NODE}" in ready["message"], ready


async def test_kubelet_restart_the_pool_reports_the_unregistered_plugin_then_is_ready_again(
    real_cluster: ClusterInfo, rapi: client.ApiClient, pools: Pools
) -> None:
    """A kubelet restart unregisters the device plugin until it registers again. Left alone, the
    plugin is back within a second, before the kubelet's next status sync may even show the gap;
    here it is held unregistered across the restart (the hang annotation: it sees kubelet.sock
    re-created, reads its node and does not register while annotated). So the window is seen,
    the kubelet's allocatable gpu-mem 0 and the pool naming the node PluginNotRegistered, Ready
    False; released, the same plugin pod registers again and the pool turns Ready again."""
    core = client.CoreV1Api(rapi)
    # readyTimeoutSeconds: the label change's grace ("restart in progress") ends soon after.
    await pools.create("rn-kubelet", memoryIsolation=True, devicePlugin={"readyTimeoutSeconds": 15})
    await pools.wait_ready("rn-kubelet")
    pod = await plugin_pod(rapi)
    await core.patch_node(NODE, {"metadata": {"annotations": {ANNOTATION_HANG: "true"}}})
    DevCluster.of(real_cluster).restart_kubelet(NODE)

    async def saw_the_restart() -> bool:
        log: str = await core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace)
        return "re-created (kubelet restart)" in log

    # The same plugin pod (the kubelet restart does not restart it) notices the restart.
    await wait_for(saw_the_restart, what="the plugin to see the kubelet restart", timeout_s=WAIT)

    async def unregistered() -> bool:
        _, alloc = await node_status(core)
        return alloc.get(c.RES_GPU_MEM, "0") == "0"

    await wait_for(unregistered, what="allocatable gpu-mem 0 after the kubelet restart", timeout_s=WAIT)
    # The operator sees the window: the node Degraded, PluginNotRegistered; the pool not Ready.
    status = await pools.wait_node_reason("rn-kubelet", "PluginNotRegistered")
    assert status["phase"] == "Degraded" and "not registered" in status["message"], status
    down = await pools.wait_ready("rn-kubelet", "False")
    down_ready = next(x for x in down["status"]["conditions"] if x["type"] == "Ready")
    assert f"device plugin not registered on {NODE}" in down_ready["message"], down_ready
    assert (await plugin_pod(rapi)).metadata.uid == pod.metadata.uid  # still running, unregistered

    # Released: the same pod registers again, and the operator sees the recovery.
    await core.patch_node(NODE, {"metadata": {"annotations": {ANNOTATION_HANG: None}}})
    await wait_for(lambda: _advertised(core, c.RES_GPU_MEM, str(GPU_MEM_GIB)), what="gpu-mem", timeout_s=WAIT)
    assert (await plugin_pod(rapi)).metadata.uid == pod.metadata.uid
    _, alloc = await node_status(core)
    assert alloc[c.RES_GPU_COUNT] == "1"
    up = await pools.wait_ready("rn-kubelet")
    up_ready = next(x for x in up["status"]["conditions"] if x["type"] == "Ready")
    assert up_ready["lastTransitionTime"] >= down_ready["lastTransitionTime"], (down_ready, up_ready)
    statuses = {s["name"]: s for s in up["status"].get("nodeStatuses") or []}
    assert statuses.get(NODE, {}).get("reason") != "PluginNotRegistered", statuses


async def test_a_rolling_plugin_restart_leaves_running_gpu_work_running(
    rapi: client.ApiClient, pools: Pools, ns: str
) -> None:
    """A placement change restarts the plugin (it reads ack.node.gpu.placement at start) without a
    mode switch, so running GPU pods do not hold it: the real kubelet keeps them running."""
    core = client.CoreV1Api(rapi)
    await pools.create("rn-running", memoryIsolation=True)
    await pools.wait_ready("rn-running")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runner"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {POOL_LABEL: NODEPOOL},
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_WORKLOAD,
                    "imagePullPolicy": "Never",
                    "args": ["--sleep", "900"],
                    "resources": {"limits": {"cpu": "50m", "memory": "32Mi", c.RES_GPU_MEM: "2"}},
                }
            ],
        },
    }
    await core.create_namespaced_pod(ns, cast(Any, body))

    async def running() -> Any:
        p = await core.read_namespaced_pod("runner", ns)
        statuses = p.status.container_statuses or []
        return p if statuses and statuses[0].state.running else None

    before = await wait_for(running, what="the GPU pod running on the real node", timeout_s=WAIT)
    started = before.status.container_statuses[0].state.running.started_at
    old = (await plugin_pod(rapi)).metadata.uid

    await pools.patch_spec("rn-running", {"placement": "spread"})
    await plugin_pod(rapi, other_than=old)
    await wait_for(lambda: _advertised(core, c.RES_GPU_MEM, str(GPU_MEM_GIB)), what="gpu-mem", timeout_s=WAIT)
    await pools.wait_ready("rn-running")
    node = await core.read_node(NODE)
    assert node.metadata.labels[c.LABEL_PLACEMENT] == "spread"
    after = await core.read_namespaced_pod("runner", ns)
    status = after.status.container_statuses[0]
    assert after.metadata.uid == before.metadata.uid
    assert status.restart_count == 0, status
    assert status.state.running is not None and status.state.running.started_at == started, status
    await core.delete_namespaced_pod("runner", ns)


async def test_plugin_kept_off_the_real_node_the_degraded_alert_is_pending_then_clears(
    rapi: client.ApiClient, pools: Pools, real_prometheus: Prometheus
) -> None:
    """Issue 38 on the real node: the device plugin's pod deleted and kept away (the node loses the
    label its DaemonSet selects, so the controller deletes the pod and makes no other); the real
    kubelet marks the plugin's devices unhealthy, allocatable gpu-mem drops to 0 at its next status
    sync, the operator reports the pool Degraded, and the live Prometheus has GPUSharePoolDegraded
    pending. The label back: a new plugin pod registers, the pool is Ready, the alert inactive."""
    core = client.CoreV1Api(rapi)
    prom = real_prometheus
    groups = {g["name"]: [r["name"] for r in g["rules"]] for g in await asyncio.to_thread(prom.rule_groups)}
    assert groups == {g["name"]: [r["alert"] for r in g["rules"]] for g in rule_file()["groups"]}
    sc = Scenario(prom)
    pool = "rn-alert"
    # readyTimeoutSeconds: the label change's grace ("restart in progress") ends soon after.
    await pools.create(pool, memoryIsolation=True, devicePlugin={"readyTimeoutSeconds": 15})
    await pools.wait_ready(pool)

    async def scraped(condition: str, value: str) -> bool:
        q = f'gpushare_pool_condition{{pool="{pool}", condition="{condition}"}}'
        return [s["value"][1] for s in await asyncio.to_thread(prom.query, q)] == [value]

    await wait_for(lambda: scraped("Ready", "1"), what=f"{pool} Ready scraped", timeout_s=60)
    await wait_for(lambda: scraped("Degraded", "0"), what=f"{pool} not Degraded scraped", timeout_s=60)
    sc.absent("GPUSharePoolDegraded")
    old = await plugin_pod(rapi)
    unlabel = {"metadata": {"labels": dict.fromkeys(PLUGIN_NODE_SELECTOR)}}
    await core.patch_node(NODE, unlabel)
    try:

        async def plugin_gone() -> bool:
            return not await plugin_pods_on(rapi, NODE)

        await wait_for(plugin_gone, what=f"no device plugin pod on {NODE}", timeout_s=WAIT)

        async def unhealthy() -> bool:
            capacity, alloc = await node_status(core)
            return capacity.get(c.RES_GPU_MEM) == str(GPU_MEM_GIB) and alloc.get(c.RES_GPU_MEM) == "0"

        # The real kubelet: capacity stays (for endpointStopGracePeriod), allocatable drops to 0.
        await wait_for(unhealthy, what="gpu-mem capacity 16, allocatable 0", timeout_s=WAIT)
        status = await pools.wait_node_reason(pool, "PluginNotRegistered")
        assert status["phase"] == "Degraded", status
        cause = "device plugin pod deleted and kept off the real node (allocatable gpu-mem 0)"
        row = await sc.pending("GPUSharePoolDegraded", cause, pool)
        # What the operator really exports for it (the promtool tests' series have this shape).
        series = await asyncio.to_thread(prom.query, f'gpushare_pool_condition{{pool="{pool}"}}')
        assert {s["metric"]["condition"]: s["value"][1] for s in series} == {
            "Ready": "0", "Progressing": "0", "Degraded": "1", "Conflict": "0",
        }, series  # fmt: skip
        print("live series: " + "; ".join(json.dumps(s["metric"], sort_keys=True) for s in series))
        sc.absent("GPUSharePoolRolloutStuck")  # nothing is rolling out: the pool is not Progressing
    finally:
        await core.patch_node(NODE, {"metadata": {"labels": PLUGIN_NODE_SELECTOR}})
    assert (await plugin_pod(rapi, other_than=old.metadata.uid)).metadata.uid != old.metadata.uid
    await wait_for(lambda: _advertised(core, c.RES_GPU_MEM, str(GPU_MEM_GIB)), what="gpu-mem", timeout_s=WAIT)
    await pools.wait_ready(pool)
    await sc.cleared(row, pool)
    report(".realnode-degraded", sc.table())
