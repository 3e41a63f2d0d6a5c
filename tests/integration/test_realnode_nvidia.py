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

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from gpushare import __version__
from gpushare import constants as c
from gpushare.devcluster import BinariesMissing, ClusterInfo, DevCluster, find_binaries, wait_for
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.realnode import IMAGE_WORKLOAD, RealNodeUnavailable, preflight
from gpushare.k8s.client import make_api_client
from support.cluster import serve
from support.namespaces import fresh_namespace

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]
NODE = "realnode-0"
GPUS = nv.DEFAULT_GPUS
CONFIGS = {"ts4": nv.time_slicing_config(4), "ts2": nv.time_slicing_config(2)}
#: Generous: a config switch is a label watch, a SIGHUP, a re-registration and a kubelet status
#: sync (10 s); a crash-looping sidecar waits out its back-off; 2 CPUs shared with other tests.
WAIT = 180.0


@pytest.fixture(scope="module")
def nvidia_cluster() -> Iterator[ClusterInfo]:
    try:
        find_binaries()
        preflight(1)
    except (BinariesMissing, RealNodeUnavailable) as exc:
        pytest.fail(f"real-node tier cannot run: {exc}", pytrace=False)
    missing = [
        f"{p} (make {target})"
        for p, target in (
            (nv.plugin_bin_dir() / "nvidia-device-plugin", "nvidia-plugin"),
            (nv.fake_nvml_lib(), "fake-nvml"),
        )
        if not p.exists()
    ]
    if missing:
        pytest.fail(
            f"NVIDIA's plugin on the real node cannot run: missing {', '.join(missing)}", pytrace=False
        )
    dev = DevCluster(real_nodes=1)

    async def prepare(info: ClusterInfo) -> None:
        api = await make_api_client(str(info.kubeconfig))
        async with api:
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


async def label_and_wait(core: client.CoreV1Api, config: str, count: int) -> None:
    """Select ``config`` on the node; wait until the kubelet's capacity and allocatable say ``count``."""
    labels = {**nv.NODE_SELECTOR, nv.CONFIG_LABEL: config}
    await core.patch_node(NODE, {"metadata": {"labels": labels}})

    async def advertised() -> bool:
        return await _allocatable(core) == (str(count), str(count))

    await wait_for(advertised, what=f"{NODE} to advertise {nv.RESOURCE}: {count} ({config})", timeout_s=WAIT)


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


async def test_a_pod_asking_for_one_gpu_gets_a_uuid_of_the_library(napi: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(napi)
    await label_and_wait(core, "ts4", 4 * GPUS)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "one-gpu"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(nv.NODE_SELECTOR),
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE_WORKLOAD,
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {"cpu": "100m", "memory": "32Mi", nv.RESOURCE: "1"}},
                }
            ],
        },
    }
    await core.create_namespaced_pod(ns, cast(Any, body))

    async def finished() -> Any:
        pod = await core.read_namespaced_pod("one-gpu", ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = await wait_for(finished, what=f"pod {ns}/one-gpu to run on {NODE}", timeout_s=WAIT)
    assert pod.status.phase == "Succeeded", pod.status
    assert pod.spec.node_name == NODE
    log: str = await core.read_namespaced_pod_log("one-gpu", ns)
    env = dict(line[4:].partition("=")[::2] for line in log.splitlines() if line.startswith("env "))
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
    dev = DevCluster.of(nvidia_cluster)
    await nv.install_agent(napi, dev, product_image, f"localhost/gpushare-operator:{__version__}")
    core = client.CoreV1Api(napi)

    async def published() -> Any:
        node = await core.read_node(NODE)
        labels = node.metadata.labels or {}
        return node if labels.get(c.LABEL_GPU_COUNT) == str(GPUS) else None

    node = await wait_for(
        published, what=f"the agent to publish {c.LABEL_GPU_COUNT}={GPUS} on {NODE}", timeout_s=WAIT
    )
    labels = node.metadata.labels
    assert labels[c.LABEL_GPU_PRODUCT] == "NVIDIA-A100-SXM4-40GB", labels
    assert labels[c.LABEL_GPU_MEMORY_MIB] == "40960", labels
    inventory = json.loads(node.metadata.annotations[c.ANNOTATION_INVENTORY])
    assert inventory["state"] == "ok", inventory
    assert [g["uuid"] for g in inventory["gpus"]] == [nv.default_uuid(i) for i in range(GPUS)], inventory
