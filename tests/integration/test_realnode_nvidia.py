"""NVIDIA's real device plugin and config-manager on the real kubelet node (issue 36, groundwork).

The module's own control plane has one real node, ``realnode-0``. NVIDIA's k8s-device-plugin
(``make nvidia-plugin``: built from the Go module proxy) runs there as its Helm chart deploys it,
a DaemonSet whose pod holds the plugin and the config-manager sidecar in one process namespace,
the named configs mounted from a ConfigMap (``gpushare.devcluster.nvidia``). There is no GPU: the
plugin loads the project's own libnvidia-ml.so.1 (``make fake-nvml``), which pretends 2 GPUs.
What is real: the plugin's NVML discovery, its time-slicing, its registration with the kubelet,
config-manager's label watch and SIGHUP, the kubelet's allocatable and its Allocate call.

Marked ``realnode``: ``make test REAL_NODES=0`` deselects it; without root or cgroups, or without
the two builds above, it FAILS, never skips.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes_asyncio import client

from gpushare import __version__
from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster, migmanager, migsim, nfd, wait_for
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.realnode import IMAGE_WORKLOAD
from gpushare.k8s.client import make_api_client
from support.cluster import serve
from support.fake_nvml import pynvml_mig_devices
from support.holds import TOUCH, hold_kept
from support.host import container_pids, frozen
from support.namespaces import fresh_namespace
from support.operator_proc import OperatorProc, launch_operator
from support.pools import PoolApi
from support.realnode_nvidia import require_nvidia_real_node

pytestmark = [
    pytest.mark.realnode,
    # label_and_wait(setup=True)'s recovery: shown in the warnings summary, not an error.
    pytest.mark.filterwarnings("default:the node's prior state came only after:UserWarning"),
]

REPO = Path(__file__).resolve().parents[2]
NODE = "realnode-0"
GPUS = nv.DEFAULT_GPUS
#: mig-mixed: every MIG profile as a resource of its own (``nvidia.com/mig-<profile>``).
CONFIGS = {
    "ts4": nv.time_slicing_config(4),
    "ts2": nv.time_slicing_config(2),
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
}
#: Generous: a config switch is a label watch, a SIGHUP, a re-registration and a kubelet status
#: sync (10 s); a crash-looping sidecar waits out its back-off; 2 CPUs shared with other tests.
WAIT = 180.0
#: A pool's config reaches the plugin pods' directory at the kubelet's next pod sync: up to 22.5 s
#: on this test bed (``syncFrequency`` 15 s plus up to half of it in jitter), 90 s on a default
#: kubelet. The pools here say so (``configPropagationSeconds``), and the operator labels the node
#: only after that.
PROPAGATION_S = 40
POOL_WAIT = WAIT + 120.0


@pytest.fixture(scope="module")
def nvidia_cluster() -> Iterator[ClusterInfo]:
    require_nvidia_real_node()
    dev = DevCluster(real_nodes=1)

    async def prepare(info: ClusterInfo) -> None:
        api = await make_api_client(str(info.kubeconfig))
        async with api:
            await install_crd_files(api, sorted((REPO / "crds").glob("*.yaml")))
            await nv.install(api, dev, CONFIGS)

    yield from serve(dev, prepare, "control plane with a real node")


@pytest.fixture
async def napi(nvidia_cluster: ClusterInfo) -> AsyncIterator[client.ApiClient]:
    api = await make_api_client(str(nvidia_cluster.kubeconfig))
    async with api:
        yield api


async def _allocatable(core: client.CoreV1Api) -> tuple[str | None, str | None]:
    node = await core.read_node(NODE)
    return (node.status.capacity or {}).get(nv.RESOURCE), (node.status.allocatable or {}).get(nv.RESOURCE)


async def label_and_wait(core: client.CoreV1Api, config: str, count: int, *, setup: bool = False) -> None:
    """Select ``config`` on the node; wait until the kubelet's capacity and allocatable say ``count``.

    ``setup``: the node's state before a test, not what the test checks. When it does not come
    within ``WAIT``, the plugin pods on the node are deleted once (their DaemonSet starts fresh
    ones, which read the label at start, with no crash-loop back-off left from an earlier test)
    and the wait repeats; the test goes on with a warning that says what the pods looked like."""
    labels = {**nv.NODE_SELECTOR, nv.CONFIG_LABEL: config}
    await core.patch_node(NODE, {"metadata": {"labels": labels}})

    async def advertised() -> bool:
        return await _allocatable(core) == (str(count), str(count))

    api: client.ApiClient = cast(Any, core).api_client
    what = f"{NODE} to advertise {nv.RESOURCE}: {count} ({config})"
    try:
        await wait_for(advertised, what=what, timeout_s=WAIT)
        return
    except TimeoutError as exc:
        state = f"{exc}\n{await _plugin_state(api, core)}"
    if not setup:
        raise AssertionError(state)
    for pod in await nv.plugin_pods_on(api, NODE):
        await core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    try:
        await wait_for(advertised, what=f"{what}, its plugin pods restarted", timeout_s=WAIT)
    except TimeoutError as exc:
        raise AssertionError(f"{state}\n{exc}\n{await _plugin_state(api, core)}") from None
    warnings.warn(
        f"the node's prior state came only after its plugin pods were restarted: {state}", stacklevel=1
    )


@pytest.fixture
async def ns(napi: client.ApiClient) -> AsyncIterator[str]:
    async with fresh_namespace(napi, "nv") as name:
        yield name


async def test_the_node_label_picks_the_time_slicing_config(napi: client.ApiClient) -> None:
    core = client.CoreV1Api(napi)
    # 2 GPUs from the library x 4 replicas, then x 2: config-manager relinks, the plugin re-registers.
    await label_and_wait(core, "ts4", 4 * GPUS)
    await label_and_wait(core, "ts2", 2 * GPUS)
    await label_and_wait(core, "ts4", 4 * GPUS)


def gpu_pod(name: str, *args: str, resource: str = nv.RESOURCE) -> dict[str, Any]:
    """A pod of the workload image asking for one ``resource`` on the real node (it prints its
    environment; ``--sleep N`` keeps it running)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(nv.NODE_SELECTOR),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_WORKLOAD,
                    "imagePullPolicy": "Never",
                    "args": list(args),
                    "resources": {"limits": {"cpu": "100m", "memory": "32Mi", resource: "1"}},
                }
            ],
        },
    }


async def run_to_completion(
    core: client.CoreV1Api, ns: str, name: str, *, resource: str = nv.RESOURCE
) -> dict[str, str]:
    """Run :func:`gpu_pod` ``name`` to its end on the real node; the environment it printed."""
    await core.create_namespaced_pod(ns, cast(Any, gpu_pod(name, resource=resource)))

    async def finished() -> Any:
        pod = await core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = await wait_for(finished, what=f"pod {ns}/{name} to run on {NODE}", timeout_s=WAIT)
    assert pod.status.phase == "Succeeded", pod.status
    assert pod.spec.node_name == NODE
    log: str = await core.read_namespaced_pod_log(name, ns)
    return dict(line[4:].partition("=")[::2] for line in log.splitlines() if line.startswith("env "))


async def test_a_pod_asking_for_one_gpu_gets_a_uuid_of_the_library(napi: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts4", 4 * GPUS)
    env = await run_to_completion(core, ns, "one-gpu")
    # The plugin's Allocate (envvar device list): one time-sliced replica of one of the 2 GPUs.
    assert env.get("NVIDIA_VISIBLE_DEVICES") in {nv.default_uuid(i) for i in range(GPUS)}, env


async def test_an_unknown_config_name_crashes_the_sidecar_and_the_plugin_falls_back_to_default(
    napi: client.ApiClient,
) -> None:
    """What NVIDIA does not guard against (the gap an operator fills): a label naming no key of
    the ConfigMap makes config-manager exit ("specified config ... does not exist"). Restarted, it
    first applies the default config (its first read of the label is empty) and signals the
    plugin, then fails again: the node silently drops to the default, unshared count."""
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts4", 4 * GPUS)
    await core.patch_node(NODE, {"metadata": {"labels": {nv.CONFIG_LABEL: "no-such-config"}}})

    async def default_advertised() -> bool:
        return await _allocatable(core) == (str(GPUS), str(GPUS))

    await wait_for(default_advertised, what=f"{NODE} back to the default config", timeout_s=WAIT)

    async def sidecar_failed() -> str | None:
        for pod in await nv.plugin_pods_on(napi, NODE):
            statuses = {s.name: s for s in pod.status.container_statuses or []}
            sidecar = statuses.get("nvidia-device-plugin-sidecar")
            if sidecar is not None and sidecar.restart_count > 0:
                log: str = await core.read_namespaced_pod_log(
                    pod.metadata.name, nv.NAMESPACE, container=sidecar.name, previous=True
                )
                return log if "specified config no-such-config does not exist" in log else None
        return None

    await wait_for(sidecar_failed, what="the sidecar's log to name the unknown config", timeout_s=WAIT)
    # A known name again: the sidecar, restarted after its back-off, applies it.
    await label_and_wait(core, "ts2", 2 * GPUS)


@pytest.fixture(scope="module")
def product_image() -> Path:
    """The product's image as a docker-archive (``make image-local``; cached, so at once when built)."""
    built = subprocess.run(
        ["bash", str(REPO / "hack/build-image-local.sh")], capture_output=True, text=True, timeout=1200
    )
    if built.returncode != 0:
        pytest.fail(f"hack/build-image-local.sh failed:\n{built.stderr[-3000:]}", pytrace=False)
    return Path(built.stdout.strip().splitlines()[-1])


async def test_the_agent_reads_the_same_gpus_through_pynvml(
    nvidia_cluster: ClusterInfo, napi: client.ApiClient, product_image: Path
) -> None:
    """The node agent (the product's image) beside NVIDIA's plugin reads the library the plugin
    reads: it publishes the 2 GPUs, and their UUIDs are the ones the plugin hands to pods."""
    node = await agent_published(nvidia_cluster, napi, product_image)
    labels = node.metadata.labels
    assert labels[c.LABEL_GPU_PRODUCT] == "NVIDIA-A100-SXM4-40GB", labels
    assert labels[c.LABEL_GPU_MEMORY_MIB] == "40960", labels
    inventory = json.loads(node.metadata.annotations[c.ANNOTATION_INVENTORY])
    assert inventory["state"] == "ok", inventory
    assert [g["uuid"] for g in inventory["gpus"]] == [nv.default_uuid(i) for i in range(GPUS)], inventory


# --- GPUSharePools with spec.nvidia, driven by the operator ----------------------------------------


async def agent_published(nvidia_cluster: ClusterInfo, napi: client.ApiClient, product_image: Path) -> Any:
    """The node agent runs on the node and has published its GPU count (what the operator reads
    to know how much a node of an NVIDIA pool must advertise)."""
    core = client.CoreV1Api(napi)
    node = await core.read_node(NODE)
    if (node.metadata.labels or {}).get(c.LABEL_GPU_COUNT) == str(GPUS):
        return node
    # The agent runs where NVIDIA's plugin runs (its node selector).
    await core.patch_node(NODE, {"metadata": {"labels": dict(nv.NODE_SELECTOR)}})
    dev = DevCluster.of(nvidia_cluster)
    await nv.install_agent(napi, dev, product_image, f"localhost/gpushare-operator:{__version__}")

    async def published() -> Any:
        node = await core.read_node(NODE)
        return node if (node.metadata.labels or {}).get(c.LABEL_GPU_COUNT) == str(GPUS) else None

    return await wait_for(
        published, what=f"the agent to publish {c.LABEL_GPU_COUNT}={GPUS} on {NODE}", timeout_s=WAIT
    )


@pytest.fixture
async def operator(
    nvidia_cluster: ClusterInfo, napi: client.ApiClient, product_image: Path, tmp_path: Path
) -> AsyncIterator[OperatorProc]:
    await agent_published(nvidia_cluster, napi, product_image)
    op = launch_operator(nvidia_cluster.kubeconfig, tmp_path / "operator.log")
    op.wait_serving()
    yield op
    op.stop()


@pytest.fixture
async def pools(napi: client.ApiClient) -> AsyncIterator[PoolApi]:
    api = PoolApi(napi)
    yield api
    for name in api.created:
        await api.delete(name)


def _nvidia(replicas: int, **more: Any) -> dict[str, Any]:
    spec = {"strategy": "TimeSlicing", "replicas": replicas, "configPropagationSeconds": PROPAGATION_S}
    return {"nvidia": spec | more}


def _condition(pool: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conds = ((pool or {}).get("status") or {}).get("conditions") or []
    return next((cond for cond in conds if cond.get("type") == kind), {})


def _ready_for_its_spec(pool: dict[str, Any] | None) -> bool:
    """Pool Ready, and for its current spec (not a Ready of the generation before the last change)."""
    ready = _condition(pool, "Ready")
    current = (pool or {}).get("metadata", {}).get("generation")
    return ready.get("status") == "True" and ready.get("observedGeneration") == current


def _node_status(pool: dict[str, Any] | None) -> dict[str, Any]:
    return next(iter(((pool or {}).get("status") or {}).get("nodeStatuses") or []), {})


async def hold_a_gpu(core: client.CoreV1Api, ns: str, name: str) -> None:
    """Start a pod holding one ``nvidia.com/gpu`` of the node for 15 minutes; wait until it runs."""
    await core.create_namespaced_pod(ns, cast(Any, gpu_pod(name, "--sleep", "900")))

    async def running() -> bool:
        pod = await core.read_namespaced_pod(name, ns)
        return bool(pod.status.phase == "Running")

    await wait_for(running, what=f"pod {ns}/{name} to run", timeout_s=WAIT)


async def _plugin_state(
    napi: client.ApiClient, core: client.CoreV1Api, pools: PoolApi | None = None, name: str = ""
) -> str:
    """What a failed wait reports: the plugin pods' containers (restarts, state, last exit), the
    node's config label and advertised count, and the pool's status (given ``pools``)."""
    lines = []
    for pod in await nv.plugin_pods_on(napi, NODE):
        for s in pod.status.container_statuses or []:
            last = s.last_state.terminated if s.last_state else None
            lines.append(
                f"pod {pod.metadata.name} container {s.name}: ready={s.ready} restarts={s.restart_count}"
                f" state={s.state.to_dict() if s.state else None}"
                f" last exit={(last.exit_code, last.reason, last.finished_at) if last else None}"
            )
    node = await core.read_node(NODE)
    lines.append(
        f"node {NODE}: {nv.CONFIG_LABEL}={(node.metadata.labels or {}).get(nv.CONFIG_LABEL)}"
        f" advertises {await _allocatable(core)}"
    )
    if pools is not None:
        lines.append(f"pool {name} status: {(await pools.get(name) or {}).get('status')}")
    return "\n".join(lines)


async def ready_with(core: client.CoreV1Api, pools: PoolApi, name: str, count: int) -> dict[str, Any]:
    """Wait until pool ``name`` is Ready; every time it says Ready, the node already advertises
    ``count`` (the pool is Ready only once the node does)."""

    async def ready() -> dict[str, Any] | None:
        pool = await pools.get(name)
        if not _ready_for_its_spec(pool):
            return None  # not Ready, or Ready for the spec before the last change
        advertised = await _allocatable(core)
        assert advertised == (str(count), str(count)), (advertised, pool)
        return pool

    pool: dict[str, Any] = await wait_for(
        ready, what=f"pool {name} Ready with {NODE} advertising {count}", timeout_s=POOL_WAIT
    )
    return pool


async def test_a_time_slicing_pool_switches_the_real_plugin_and_restores_the_node_on_delete(
    napi: client.ApiClient, ns: str, operator: OperatorProc, pools: PoolApi
) -> None:
    """The operator writes the pool's config into NVIDIA's ConfigMap, labels the node once the
    config can have reached the plugin pod, and the real config-manager switches the real plugin
    to 4 replicas of the library's 2 GPUs. Deleting the pool puts the node's config back."""
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts2", 2 * GPUS, setup=True)  # the node's config before gpushare
    await pools.create_pool("ts", {c.LABEL_HOSTNAME: NODE}, **_nvidia(4))
    pool = await ready_with(core, pools, "ts", 4 * GPUS)
    config = pool["status"]["schedule"]
    assert pool["status"]["backend"] == "nvidia" and config.startswith("gpushare-ts4-"), pool["status"]
    node = await core.read_node(NODE)
    assert node.metadata.labels[nv.CONFIG_LABEL] == config
    configs = await core.read_namespaced_config_map(nv.CONFIGS_CONFIGMAP, nv.NAMESPACE)
    assert set(CONFIGS) <= set(configs.data), "keys gpushare did not write are kept"
    env = await run_to_completion(core, ns, "ts-job")
    assert env.get("NVIDIA_VISIBLE_DEVICES") in {nv.default_uuid(i) for i in range(GPUS)}, env

    await pools.delete("ts")

    async def restored() -> bool:
        node = await core.read_node(NODE)
        return (node.metadata.labels or {}).get(nv.CONFIG_LABEL) == "ts2" and await _allocatable(core) == (
            str(2 * GPUS),
            str(2 * GPUS),
        )

    await wait_for(restored, what=f"{NODE} back on its own config ts2", timeout_s=WAIT)


async def test_fewer_replicas_wait_for_the_running_pod_and_more_replicas_switch_at_once(
    napi: client.ApiClient, ns: str, operator: OperatorProc, pools: PoolApi
) -> None:
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts2", 2 * GPUS, setup=True)
    # First at 2 replicas, then 4: the pool's 2-replica config is then in the plugin pods' mounted
    # ConfigMap already, so nothing but the hold keeps the node from being labelled with it.
    await pools.create_pool("tsw", {c.LABEL_HOSTNAME: NODE}, **_nvidia(2), rollout={"modeSwitch": "Wait"})
    await ready_with(core, pools, "tsw", 2 * GPUS)
    await pools.patch_spec("tsw", _nvidia(4))
    four = (await ready_with(core, pools, "tsw", 4 * GPUS))["status"]["schedule"]
    await hold_a_gpu(core, ns, "holder")

    # 4 -> 2 under the running pod: held, and the node and the pod are named.
    await pools.patch_spec("tsw", _nvidia(2))

    async def held() -> dict[str, Any] | None:
        pool = await pools.get("tsw")
        shown = _node_status(pool)
        return pool if shown.get("phase") == "Held" else None

    pool = await wait_for(held, what="the node held by the running pod", timeout_s=WAIT)
    shown = _node_status(pool)
    assert shown["name"] == NODE and f"{ns}/holder" in shown["message"], shown
    assert _condition(pool, "Progressing").get("reason") == "NodesHeld", pool["status"]

    # The hold as the node shows it, over the next passes: its config label stays the 4-replica
    # config and it keeps advertising 4 x GPUs (an operator that reports Held but writes the
    # label, or holds for one pass only, is seen here).
    def still_four(labels: Mapping[str, str], allocatable: Mapping[str, str]) -> str:
        if labels.get(nv.CONFIG_LABEL) != four:
            return f"{nv.CONFIG_LABEL}={labels.get(nv.CONFIG_LABEL)}, not the held {four}"
        if allocatable.get(nv.RESOURCE) != str(4 * GPUS):
            return f"advertises {nv.RESOURCE}: {allocatable.get(nv.RESOURCE)}, not {4 * GPUS}"
        return ""

    await hold_kept(core, NODE, operator, "tsw", still_four)
    shown = _node_status(await pools.get("tsw"))
    assert shown.get("phase") == "Held", shown

    # The pod ends: the node switches to 2 replicas.
    await core.delete_namespaced_pod("holder", ns, grace_period_seconds=0)
    await ready_with(core, pools, "tsw", 2 * GPUS)

    # 2 -> 4 with a pod running: more replicas disrupt nothing, no hold (the 4-replica config is
    # still in the ConfigMap from before: ready at once).
    await hold_a_gpu(core, ns, "holder2")
    await pools.patch_spec("tsw", _nvidia(4))
    await ready_with(core, pools, "tsw", 4 * GPUS)
    # Gone before the pool is deleted: its restore (4 -> the node's own ts2) would wait for it.
    await core.delete_namespaced_pod("holder2", ns, grace_period_seconds=0)


async def test_an_edited_config_reaches_the_node_under_a_new_name(
    napi: client.ApiClient, operator: OperatorProc, pools: PoolApi
) -> None:
    """config-manager acts only when the label's value changes: an edit of the pool's config
    (same replicas) is a new config name, so it reaches the node."""
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts2", 2 * GPUS, setup=True)
    await pools.create_pool("tse", {c.LABEL_HOSTNAME: NODE}, **_nvidia(4))
    before = (await ready_with(core, pools, "tse", 4 * GPUS))["status"]["schedule"]
    await pools.patch_spec("tse", _nvidia(4, failRequestsGreaterThanOne=True))

    async def relabelled() -> str | None:
        node = await core.read_node(NODE)
        value = (node.metadata.labels or {}).get(nv.CONFIG_LABEL)
        return value if value not in (before, None) else None

    after = await wait_for(relabelled, what=f"{NODE} labelled with the edited config", timeout_s=POOL_WAIT)
    assert after.startswith("gpushare-ts4-") and after != before
    configs = await core.read_namespaced_config_map(nv.CONFIGS_CONFIGMAP, nv.NAMESPACE)
    assert "failRequestsGreaterThanOne: true" in configs.data[after], configs.data[after]
    await ready_with(core, pools, "tse", 4 * GPUS)


async def test_a_config_the_sidecar_cannot_find_fails_the_node_and_says_why(
    napi: client.ApiClient, operator: OperatorProc, pools: PoolApi
) -> None:
    """The pool points at a ConfigMap the plugin pods do not mount: gpushare writes its config
    there and labels the node, the real sidecar cannot find the config and crash-loops. The pool
    names the node and the reason once devicePlugin.readyTimeoutSeconds has passed."""
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts2", 2 * GPUS, setup=True)
    elsewhere = "gpushare-test-unmounted"
    await core.create_namespaced_config_map(
        nv.NAMESPACE, cast(Any, {"metadata": {"name": elsewhere}, "data": {"unrelated": "x"}})
    )
    try:
        # 3 replicas: a config no other test puts into the mounted ConfigMap (names follow the
        # content, so the same config there would be found by the sidecar).
        spec = _nvidia(3, configMap={"name": elsewhere}, configPropagationSeconds=5)
        await pools.create_pool(
            "tsbad", {c.LABEL_HOSTNAME: NODE}, **spec, devicePlugin={"readyTimeoutSeconds": 30}
        )

        async def failed() -> dict[str, Any] | None:
            pool = await pools.get("tsbad")
            shown = _node_status(pool)
            return pool if shown.get("phase") in ("Failed", "Degraded") else None

        try:
            pool = await wait_for(failed, what="the pool to report the node failed", timeout_s=POOL_WAIT)
        except TimeoutError:
            node = await core.read_node(NODE)
            raise AssertionError(
                f"{(await pools.get('tsbad') or {}).get('status')}; node labels {node.metadata.labels}, "
                f"annotations {node.metadata.annotations}, allocatable {node.status.allocatable}"
            ) from None
        shown = _node_status(pool)
        assert shown["name"] == NODE, shown
        # The sidecar's own failure, named: its container, with its restarts (not only what the node
        # advertises, which any stale mode would say).
        assert "container nvidia-device-plugin-sidecar" in shown["message"], shown
        print(f"the pool's reason for {NODE}: {shown['reason']}: {shown['message']}")
        assert _condition(pool, "Ready").get("status") == "False", pool["status"]
        cm = await core.read_namespaced_config_map(elsewhere, nv.NAMESPACE)
        assert cm.data["unrelated"] == "x"
    finally:
        await pools.delete("tsbad")
        await core.delete_namespaced_config_map(elsewhere, nv.NAMESPACE)
    # Its prior config back: the sidecar, restarted after its back-off, applies it.
    await label_and_wait(core, "ts2", 2 * GPUS)


async def test_the_operator_killed_mid_switch_converges_and_switches_the_node_once(
    nvidia_cluster: ClusterInfo, napi: client.ApiClient, product_image: Path, pools: PoolApi, tmp_path: Path
) -> None:
    """SIGKILL right after the operator labelled the node, before the plugin advertises the new
    count: a new operator picks up where it stopped (the restart record on the node), and the
    node's config label went from its prior value to the pool's config once, never back.

    The real config-manager switches the plugin within a second or so of the label, sooner than
    the test can be sure to kill the operator; so the sidecar is frozen (SIGSTOP on the host) from
    before the pool exists until the first operator is dead, which holds the node mid-switch."""
    core = client.CoreV1Api(napi)
    await agent_published(nvidia_cluster, napi, product_image)
    await label_and_wait(core, "ts2", 2 * GPUS, setup=True)
    sidecars = [
        s.container_id
        for pod in await nv.plugin_pods_on(napi, NODE)
        for s in pod.status.container_statuses or []
        if s.name == "nvidia-device-plugin-sidecar" and s.container_id
    ]
    pids = [pid for cid in sidecars for pid in container_pids(cid)]
    assert pids, f"no host process of the config-manager sidecar on {NODE}"
    seen: list[str | None] = []
    stop = asyncio.Event()

    async def record() -> None:
        while not stop.is_set():
            node = await core.read_node(NODE)
            value = (node.metadata.labels or {}).get(nv.CONFIG_LABEL)
            if not seen or seen[-1] != value:
                seen.append(value)
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(record())
    first = launch_operator(nvidia_cluster.kubeconfig, tmp_path / "first.log")
    second: OperatorProc | None = None
    try:
        first.wait_serving()
        with frozen(pids):
            await pools.create_pool("tsk", {c.LABEL_HOSTNAME: NODE}, **_nvidia(4))

            async def labelled() -> str | None:
                node = await core.read_node(NODE)
                value = (node.metadata.labels or {}).get(nv.CONFIG_LABEL)
                return value if value not in ("ts2", None) else None

            config = await wait_for(labelled, what=f"{NODE} labelled by the pool", timeout_s=POOL_WAIT)
            first.kill()
            switched = (str(4 * GPUS), str(4 * GPUS))
            assert await _allocatable(core) != switched, "switched while the sidecar was frozen"
        second = launch_operator(nvidia_cluster.kubeconfig, tmp_path / "second.log")
        second.wait_serving()
        try:
            await ready_with(core, pools, "tsk", 4 * GPUS)
        except TimeoutError as exc:  # say what the node and its plugin were doing (CI of 58d253c)
            raise AssertionError(f"{exc}\n{await _plugin_state(napi, core, pools, 'tsk')}") from None
        await pools.delete("tsk")
    finally:
        stop.set()
        await watcher
        first.stop()
        if second is not None:
            second.stop()
    assert seen[:2] == ["ts2", config] and seen.count(config) == 1, seen


# --- GPU Feature Discovery and NFD rewrite the node's NVIDIA labels under the pool's sharing --------

#: A label of the user's: what a pool of NVIDIA's backend selects by (the CRD refuses the labels GFD
#: rewrites; tests/integration/test_crd_server.py, ``nvidia-selector-on-gpu-product``).
USER_LABEL = "example.com/gpu-pool"
PRODUCT = "NVIDIA-A100-SXM4-40GB"  # the fake library's GPUs, as GFD names them
#: GFD passes after its -SHARED labels reached the node, with the pool Ready and untouched throughout.
GFD_PASSES = 2


@pytest.fixture
async def gfd(nvidia_cluster: ClusterInfo, napi: client.ApiClient) -> AsyncIterator[None]:
    """NVIDIA's GPU Feature Discovery beside the plugin, and NFD's nfd-master that turns its
    NodeFeature objects into the node's labels (both real; ``gpushare.devcluster.nfd``)."""
    await nfd.install(napi, DevCluster.of(nvidia_cluster))
    await nv.install_gfd(napi)
    yield
    await nv.uninstall_gfd(napi)
    await nfd.uninstall(napi)


async def _gfd_state(napi: client.ApiClient) -> str:
    """What a failed wait on GFD reports: GFD's and nfd-master's pods and the end of their logs."""
    core = client.CoreV1Api(napi)
    lines = []
    for ns, selector in (
        (nv.NAMESPACE, "app.kubernetes.io/name=gpu-feature-discovery"),
        (nfd.NAMESPACE, "app=nfd-master"),
    ):
        for pod in (await core.list_namespaced_pod(ns, label_selector=selector)).items:
            for s in pod.status.container_statuses or []:
                lines.append(
                    f"pod {ns}/{pod.metadata.name} {s.name}: ready={s.ready} restarts={s.restart_count}"
                )
                if s.state and s.state.running:
                    log: str = await core.read_namespaced_pod_log(
                        pod.metadata.name, ns, container=s.name, tail_lines=15
                    )
                    lines += [f"  {line}" for line in log.splitlines()]
    return "\n".join(lines)


def _gfd_says(product: str, replicas: int, strategy: str) -> Callable[[Mapping[str, str]], bool]:
    def says(labels: Mapping[str, str]) -> bool:
        return (
            labels.get("nvidia.com/gpu.product") == product
            and labels.get("nvidia.com/gpu.replicas") == str(replicas)
            and labels.get("nvidia.com/gpu.sharing-strategy") == strategy
        )

    return says


async def _node_labels_until(
    core: client.CoreV1Api, napi: client.ApiClient, ok: Callable[[Mapping[str, str]], bool], what: str
) -> dict[str, str]:
    async def labels() -> dict[str, str] | None:
        node = await core.read_node(NODE)
        found = dict(node.metadata.labels or {})
        return found if ok(found) else None

    try:
        result: dict[str, str] = await wait_for(labels, what=what, timeout_s=WAIT)
    except TimeoutError as exc:
        node = await core.read_node(NODE)
        features = await client.CustomObjectsApi(napi).list_namespaced_custom_object(
            nfd.GROUP, nfd.VERSION, nv.NAMESPACE, nfd.PLURAL
        )
        raise AssertionError(
            f"{exc}\nnode labels {node.metadata.labels}\nNodeFeature objects {features.get('items')}"
        ) from None
    return result


async def test_gfd_rewrites_the_shared_nodes_product_and_a_pool_on_a_users_label_stays_ready(
    napi: client.ApiClient, operator: OperatorProc, pools: PoolApi, gfd: None
) -> None:
    """The real GFD labels the node from NVML and the config the real config-manager picked, through
    a NodeFeature object that the real nfd-master turns into node labels. Unshared, the product is
    the GPU's name; once a time-slicing pool (selecting a label of the user's) has switched the
    node, GFD appends -SHARED and writes the pool's replicas and strategy. Over the next GFD passes
    and operator passes the pool stays Ready on the node, and no label of the operator's is
    removed or rewritten: nothing to restore, nothing flaps (a pool selecting
    ``nvidia.com/gpu.product`` would have lost the node here; the CRD refuses it at apply)."""
    core = client.CoreV1Api(napi)
    await label_and_wait(core, nv.DEFAULT_CONFIG, GPUS, setup=True)
    await _node_labels_until(core, napi, _gfd_says(PRODUCT, 1, "none"), f"GFD's unshared labels on {NODE}")

    await core.patch_node(NODE, {"metadata": {"labels": {USER_LABEL: "gfd"}}})
    try:
        await pools.create_pool("gfd", {USER_LABEL: "gfd"}, **_nvidia(4))
        pool = await ready_with(core, pools, "gfd", 4 * GPUS)
        shared = await _node_labels_until(
            core, napi, _gfd_says(f"{PRODUCT}-SHARED", 4, "time-slicing"), f"GFD's -SHARED labels on {NODE}"
        )
        ready_since = _condition(pool, "Ready")["lastTransitionTime"]
        assert shared[nv.CONFIG_LABEL] == pool["status"]["schedule"], shared
        theirs = {k: v for k, v in shared.items() if k.startswith(c.GROUP + "/") or k == nv.CONFIG_LABEL}
        assert theirs, shared
        gfd_before = await nv.gfd_passes(napi, NODE)
        passes_before = operator.passes("gfd")
        seen = {"gfd": gfd_before, "operator": passes_before}
        # A label of the test's own: the operator's next pass plans the node again (a pass plans
        # only changed nodes between its quiet resyncs), with GFD's rewritten labels in its view.
        await core.patch_node(NODE, {"metadata": {"labels": {TOUCH: "gfd"}}})

        async def kept_over_passes() -> bool:
            # Read before the node and the pool: what they show follows these passes.
            seen["gfd"], seen["operator"] = await nv.gfd_passes(napi, NODE), operator.passes("gfd")
            node = await core.read_node(NODE)
            labels = node.metadata.labels or {}
            now = {k: v for k, v in labels.items() if k.startswith(c.GROUP + "/") or k == nv.CONFIG_LABEL}
            assert now == theirs, f"the operator's labels changed under GFD: {theirs} -> {now}"
            assert _gfd_says(f"{PRODUCT}-SHARED", 4, "time-slicing")(labels), labels
            pool = await pools.get("gfd")
            ready = _condition(pool, "Ready")
            assert ready.get("status") == "True" and ready.get("lastTransitionTime") == ready_since, pool
            assert _node_status(pool).get("name") == NODE, pool
            return seen["gfd"] >= gfd_before + GFD_PASSES and seen["operator"] > passes_before

        try:
            await wait_for(
                kept_over_passes,
                what=f"{GFD_PASSES} more GFD passes and an operator pass",
                timeout_s=WAIT,
                interval=1.0,
            )
        except TimeoutError as exc:
            raise AssertionError(
                f"{exc}\nGFD passes {gfd_before} -> {seen['gfd']}; operator passes of the pool"
                f" {passes_before} -> {seen['operator']}\n{await _gfd_state(napi)}"
            ) from None
        print(f"the pool Ready throughout: GFD passes {gfd_before} -> {seen['gfd']}", end="")
        print(f", operator passes {passes_before} -> {seen['operator']}")
    finally:
        await core.patch_node(NODE, {"metadata": {"labels": {USER_LABEL: None, TOUCH: None}}})


# --- MIG: NVIDIA's nvidia-mig-parted partitions the library's GPUs, the real plugin serves them ----

#: Per GPU: 2 + 2 + 3 compute slices of the A100 40GB's 7 (test_mig_parted.py applies the same).
MIG_GEOMETRY = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
#: The MIG manager's own configs before the pool (the pool's entry is added beside them, and kept apart).
MIG_PARTED_CONFIG = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.5gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}],
    },
}
#: What NVIDIA's reconfigure-mig.sh says at each step of a change, in order (its own words).
MANAGER_STEPS = (
    "node label to 'pending'",
    "Waiting for the device-plugin to shutdown",
    "MIG configuration applied successfully",
    "node label to 'success'",
)


async def test_a_mig_pool_drives_nvidias_mig_manager_and_plugin_on_the_real_node(
    nvidia_cluster: ClusterInfo,
    napi: client.ApiClient,
    ns: str,
    product_image: Path,
    operator: OperatorProc,
    pools: PoolApi,
) -> None:
    """A MIG pool of the operator's over NVIDIA's MIG manager as the GPU Operator deploys it
    (``gpushare.devcluster.migmanager``) and NVIDIA's plugin, both over the project's library:

    - the pool's mixed geometry: the operator writes it into the manager's ``config.yaml`` and the
      plugin's ``migStrategy: mixed`` config into the plugin's ConfigMap, then labels the node;
      reconfigure-mig.sh sets ``pending``, pauses the plugin (its pod leaves, a new one comes),
      nvidia-mig-parted applies, ``success``; the pool is Ready with the kubelet advertising each
      profile; a pod asking for one ``nvidia.com/mig-1g.5gb`` gets a ``MIG-`` UUID that pynvml
      enumerates over the same state, and the node agent (the product's image, pynvml) publishes
      the same MIG devices in its inventory;
    - another geometry (7 x 1g.5gb), the pod gone: paused again, the new counts advertised;
    - a geometry the A100 cannot hold: ``failed``, mig-parted's error in the manager's log, and the
      pool names the node, the config and ``failed``;
    - the pool deleted: the node's own MIG config (``all-disabled``) back, applied."""
    core = client.CoreV1Api(napi)
    dev = DevCluster.of(nvidia_cluster)
    state_dir = nvidia_cluster.dir / "mig"
    base = {**nv.NODE_SELECTOR, nv.GPU_OPERATOR_DEPLOY_LABEL: "true", **migmanager.NODE_SELECTOR}
    await core.patch_node(NODE, {"metadata": {"labels": {**base, c.LABEL_MIG_CONFIG: "all-disabled"}}})
    await nv.install(napi, dev, CONFIGS, mig_state_dir=state_dir, gpu_operator_labels=True)
    await migmanager.install(napi, dev, state_dir, yaml.safe_dump(MIG_PARTED_CONFIG))
    agent_image = f"localhost/gpushare-operator:{__version__}"
    await nv.install_agent(napi, dev, product_image, agent_image, mig_state_dir=state_dir)
    try:
        await wait_for(
            lambda: _mig_state_is(core, "success"), what="the node's own all-disabled applied", timeout_s=WAIT
        )
        log = await _manager_log(napi)
        before = await _plugin_uids(napi)
        await pools.create_pool(
            "mig",
            {c.LABEL_HOSTNAME: NODE},
            nvidia=_mig(MIG_GEOMETRY),
            rollout={"modeSwitch": "Wait"},
            devicePlugin={"readyTimeoutSeconds": int(WAIT)},
        )
        wanted = {f"{c.RES_NVIDIA_MIG_PREFIX}{p}": str(n * GPUS) for p, n in MIG_GEOMETRY.items()}
        alloc, log, mixed = await _mig_pool_ready(napi, pools, "mig", wanted, before, log)
        print(f"allocatable: { {k: v for k, v in sorted(alloc.items()) if k.startswith('nvidia.com/')} }")
        cm = await core.read_namespaced_config_map(c.MIG_CONFIGS_CONFIGMAP, migmanager.NAMESPACE)
        entries = yaml.safe_load((cm.data or {}).get(migsim.CHART_KEY, "")).get("mig-configs", {})
        assert set(entries) == {*MIG_PARTED_CONFIG["mig-configs"], mixed}, sorted(entries)
        env = await run_to_completion(core, ns, "one-slice", resource=f"{c.RES_NVIDIA_MIG_PREFIX}1g.5gb")
        devices = await _pynvml_mig(state_dir)
        for gpu in range(GPUS):
            assert sorted(p for g, p, _ in devices if g == gpu) == sorted(
                p for p, n in MIG_GEOMETRY.items() for _ in range(n)
            ), devices
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
        assert visible.startswith("MIG-") and visible in {u for _, p, u in devices if p == "1g.5gb"}, env
        print(f"the pod's NVIDIA_VISIBLE_DEVICES={visible}")
        mine = sorted((g, p, u) for g, p, u in devices)

        async def agent_sees() -> list[Any] | None:
            node = await core.read_node(NODE)
            inventory = json.loads((node.metadata.annotations or {}).get(c.ANNOTATION_INVENTORY, "{}"))
            seen = sorted(
                (gpu["index"], m["profile"], m["uuid"])
                for gpu in inventory.get("gpus", [])
                for m in gpu.get("migDevices", [])
            )
            return seen if seen == mine else None

        await wait_for(agent_sees, what=f"the agent to publish the MIG devices {mine}", timeout_s=WAIT)

        # Another geometry, the pod gone: a mode switch, paused and applied again.
        before = await _plugin_uids(napi)
        await pools.patch_spec("mig", {"nvidia": _mig({"1g.5gb": 7})})
        alloc, log, sevens = await _mig_pool_ready(
            napi, pools, "mig", {f"{c.RES_NVIDIA_MIG_PREFIX}1g.5gb": str(7 * GPUS)}, before, log
        )
        assert sevens != mixed, "a new geometry is a config of another name"
        # The profiles no longer served: none allocatable (the kubelet drops them after a grace).
        assert all(
            alloc.get(f"{c.RES_NVIDIA_MIG_PREFIX}{p}") in (None, "0") for p in ("2g.10gb", "3g.20gb")
        ), alloc

        # 3 + 3 + 2 compute slices: one more than the A100 has. The manager fails it, the pool says so.
        await pools.patch_spec("mig", {"nvidia": _mig({"3g.20gb": 2, "2g.10gb": 1})})

        async def named() -> tuple[dict[str, Any], str] | None:
            shown = _node_status(await pools.get("mig"))
            if shown.get("reason") not in ("MigConfigFailed", "MigOperandsPaused"):
                return None
            return shown, await _manager_log(napi)

        try:
            shown, log = await wait_for(
                named, what="the pool naming the failed geometry", timeout_s=POOL_WAIT
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{await _manager_state(napi, core)}") from None
        node = await core.read_node(NODE)
        labels = node.metadata.labels or {}
        config = labels.get(c.LABEL_MIG_CONFIG, "")
        assert config not in ("", sevens) and labels.get(c.LABEL_MIG_CONFIG_STATE) == "failed", labels
        assert shown["name"] == NODE and shown["phase"] == "Failed", shown
        assert config in shown["message"] and f"{c.LABEL_MIG_CONFIG_STATE}=failed" in shown["message"], shown
        # NVIDIA's reconfigure-mig.sh (v0.10.0) pauses nvsm with the other operands but sets back only
        # the other four when it fails, so the pool says so too (the simulated manager does the same).
        paused = labels.get(f"{migsim.DEPLOY_PREFIX}nvsm")
        assert paused == "paused-for-mig-change" and shown["reason"] == "MigOperandsPaused", (labels, shown)
        assert shown["message"].endswith("operands left paused-for-mig-change: nvsm"), shown
        assert "node label to 'failed'" in log and "ERROR_INSUFFICIENT_RESOURCES" in log, log[-3000:]
        print(f"the pool says: {shown['message']}")
        assert _condition(await pools.get("mig"), "Ready").get("status") == "False"
    finally:
        # The pool deleted: the node's own MIG config back, applied (the failed geometry left the
        # 7 x 1g.5gb slices; all-disabled removes them).
        if "mig" in pools.created:  # not when the test failed before creating it
            await pools.delete("mig")
            pools.created.remove("mig")
        labels = (await core.read_node(NODE)).metadata.labels or {}
        assert labels.get(c.LABEL_MIG_CONFIG) == "all-disabled", labels

        async def disabled() -> bool:
            return await _mig_state_is(core, "success") and not await _pynvml_mig(state_dir)

        await wait_for(disabled, what="all-disabled applied", timeout_s=WAIT)
        await client.AppsV1Api(napi).delete_namespaced_daemon_set(migmanager.DS_NAME, migmanager.NAMESPACE)
        # The labels the manager and this test set: every operand's, the config and its state.
        labels = (await core.read_node(NODE)).metadata.labels or {}
        gone = [k for k in labels if k.startswith(migsim.DEPLOY_PREFIX)]
        await core.patch_node(
            NODE,
            {"metadata": {"labels": dict.fromkeys([*gone, c.LABEL_MIG_CONFIG, c.LABEL_MIG_CONFIG_STATE])}},
        )
        # The plain plugin only once the MIG one is gone: the DaemonSet replaced in place once left
        # the kubelet advertising capacity 8, allocatable 0 until the new pod was restarted (a CI
        # rehearsal; the old plugin leaving while the new one registers is the suspect).
        apps = client.AppsV1Api(napi)
        await apps.delete_namespaced_daemon_set(nv.DS_NAME, nv.NAMESPACE)

        async def plugin_gone() -> bool:
            return not await nv.plugin_pods_on(napi, NODE)

        await wait_for(plugin_gone, what="the MIG variant of the plugin gone", timeout_s=WAIT)
        await nv.install(napi, dev, CONFIGS)
        await nv.install_agent(napi, dev, product_image, agent_image)
        await label_and_wait(core, "ts4", 4 * GPUS, setup=True)


def _mig(profiles: Mapping[str, int]) -> dict[str, Any]:
    """A pool's spec.nvidia: MIG, one geometry for every GPU, the mixed strategy."""
    mig = {"strategy": "mixed", "geometry": [{"profiles": dict(profiles)}]}
    return {"strategy": "MIG", "mig": mig, "configPropagationSeconds": PROPAGATION_S}


async def _mig_state_is(core: client.CoreV1Api, state: str) -> bool:
    node = await core.read_node(NODE)
    return (node.metadata.labels or {}).get(c.LABEL_MIG_CONFIG_STATE) == state


async def _plugin_uids(api: client.ApiClient) -> set[str]:
    return {p.metadata.uid for p in await nv.plugin_pods_on(api, NODE)}


async def _mig_pool_ready(
    api: client.ApiClient,
    pools: PoolApi,
    name: str,
    wanted: Mapping[str, str],
    before: set[str],
    after: str,
) -> tuple[dict[str, str], str, str]:
    """Wait until pool ``name`` is Ready for its current spec; then the node carries a config of
    the pool's in ``nvidia.com/mig.config`` with ``success``, advertises ``wanted``, its plugin
    pods are new ones (none of ``before``: the manager paused the plugin), and the manager's log,
    past ``after`` (its log before), holds :data:`MANAGER_STEPS` in order. Returns the allocatable,
    the manager's log and the config."""
    core = client.CoreV1Api(api)

    async def ready() -> dict[str, Any] | None:
        pool = await pools.get(name)
        return pool if _ready_for_its_spec(pool) else None

    try:
        pool = await wait_for(ready, what=f"pool {name} Ready", timeout_s=POOL_WAIT)
    except TimeoutError as exc:
        state = await _manager_state(api, core)
        raise AssertionError(f"{exc}\npool: {(await pools.get(name) or {}).get('status')}\n{state}") from None
    node = await core.read_node(NODE)
    labels, alloc = node.metadata.labels or {}, dict(node.status.allocatable or {})
    config = labels.get(c.LABEL_MIG_CONFIG, "")
    said = f"pool {name} said Ready: {pool.get('status')}\nthe node then: {labels} {alloc}"
    assert config.startswith("gpushare-mig-") and labels.get(c.LABEL_MIG_CONFIG_STATE) == "success", said
    assert {k: alloc.get(k) for k in wanted} == dict(wanted), said
    pods = await _plugin_uids(api)
    assert pods and not pods & before, f"the plugin's pods were not replaced: {before} -> {pods}"
    log = await _manager_log(api)
    assert log.startswith(after), "the manager's pod restarted"
    at = len(after)
    for step in MANAGER_STEPS:
        found = log.find(step, at)
        assert found >= 0, (
            f"{step!r} not in the manager's log after the previous step:\n{log[len(after) :][-3000:]}"
        )
        at = found
    return alloc, log, config


async def _pynvml_mig(state_dir: Path) -> list[list[Any]]:
    return await asyncio.to_thread(pynvml_mig_devices, state_dir / nv.MIG_STATE_FILE)


async def _manager_log(api: client.ApiClient) -> str:
    core = client.CoreV1Api(api)
    pods = await core.list_namespaced_pod(
        migmanager.NAMESPACE,
        label_selector=",".join(f"{k}={v}" for k, v in migmanager.APP_LABELS.items()),
        field_selector=f"spec.nodeName={NODE}",
    )
    logs = []
    for pod in pods.items:
        try:
            logs.append(await core.read_namespaced_pod_log(pod.metadata.name, migmanager.NAMESPACE))
        except client.ApiException as exc:
            logs.append(f"{pod.metadata.name}: no log ({exc.status} {exc.reason})")
    return "\n".join(logs)


async def _manager_state(api: client.ApiClient, core: client.CoreV1Api) -> str:
    node = await core.read_node(NODE)
    labels = {k: v for k, v in (node.metadata.labels or {}).items() if k.startswith("nvidia.com/")}
    log = await _manager_log(api)
    return f"labels: {labels}\n{await _plugin_state(api, core)}\nmanager's log (tail):\n{log[-4000:]}"
