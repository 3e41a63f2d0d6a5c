"""``make cluster``'s NVIDIA node pools: NVIDIA's plugin and config-manager (and, on the MIG node
pool, NVIDIA's MIG manager) as ``pluginsim`` plays them on kwok nodes, and ``kubectl apply -f
examples/pool-nvidia-time-slicing.yaml`` and ``examples/pool-nvidia-mig.yaml`` ending Ready.

One cluster of the ``make cluster`` layout (``python -m gpushare.devcluster up`` with no
``--pools``) in its own directory, for this module: the session cluster is left alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import BinariesMissing, find_binaries, wait_for
from gpushare.devcluster.demo import DEMO_POOLS, MIG_NODE_POOL, MIG_START_CONFIG, NVIDIA_NODE_POOL
from gpushare.devcluster.fakes import POOL_LABEL, pod_running_and_ready
from gpushare.devcluster.pluginsim import ANNOTATION_STATE
from gpushare.k8s.client import make_api_client
from support.operator_proc import launch_operator

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pool-nvidia-time-slicing.yaml"
NVIDIA_NODES = [f"{NVIDIA_NODE_POOL.prefix}-{i}" for i in range(NVIDIA_NODE_POOL.count)]
GPUS = NVIDIA_NODE_POOL.gpus
MIG_EXAMPLE = REPO / "examples" / "pool-nvidia-mig.yaml"
MIG_NODES = [f"{MIG_NODE_POOL.prefix}-{i}" for i in range(MIG_NODE_POOL.count)]
#: What a node of the MIG node pool advertises under the MIG example's geometry (per GPU: 1 x
#: 3g.40gb, 1 x 2g.20gb, 2 x 1g.10gb).
MIG_DEVICES = {
    f"{c.RES_NVIDIA_MIG_PREFIX}{p}": n * MIG_NODE_POOL.gpus
    for p, n in (("3g.40gb", 1), ("2g.20gb", 1), ("1g.10gb", 2))
}
#: A config of the test's own: time-sliced 3 ways, advertised as nvidia.com/gpu.shared.
LATE = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n" + (
    "    - name: nvidia.com/gpu\n      replicas: 3\n"
)


@pytest.fixture(scope="module")
def made_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``make cluster``; its kubeconfig."""
    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    d = tmp_path_factory.mktemp("make-cluster")
    crd = REPO / "crds" / "gpushare.io_gpusharepools.yaml"
    cli = [sys.executable, "-m", "gpushare.devcluster"]
    up = subprocess.run(
        [*cli, "up", "--dir", str(d), f"--crd={crd}"], cwd=REPO, capture_output=True, text=True, timeout=180
    )
    try:
        assert up.returncode == 0, up.stderr + (d / "supervisor.log").read_text(errors="replace")[-3000:]
        assert "examples/pool-nvidia-time-slicing.yaml" in up.stdout
        assert "examples/pool-nvidia-mig.yaml" in up.stdout
        yield d / "kubeconfig"
    finally:
        subprocess.run([*cli, "down", "--dir", str(d)], capture_output=True, timeout=60)


@pytest.fixture
async def api(made_cluster: Path) -> AsyncIterator[client.ApiClient]:
    api_client = await make_api_client(str(made_cluster))
    async with api_client:
        yield api_client


async def _advertised(api: client.ApiClient, node: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The node's NVIDIA resources (allocatable) and what the simulator recorded."""
    obj = await client.CoreV1Api(api).read_node(node)
    allocatable = {k: v for k, v in (obj.status.allocatable or {}).items() if k.startswith("nvidia.com/")}
    return allocatable, json.loads((obj.metadata.annotations or {}).get(ANNOTATION_STATE) or "{}")


async def _wait_advertises(
    api: client.ApiClient, node: str, want: dict[str, str], *, label: str, config: str
) -> None:
    async def check() -> bool:
        allocatable, state = await _advertised(api, node)
        return allocatable == want and (state.get("label"), state.get("config")) == (label, config)

    await wait_for(
        check, what=f"{node} advertising {want} with label {label!r}, config {config}", timeout_s=20
    )


def _kubectl(kubeconfig: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", *args], input=stdin, env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


async def _nodes(kubeconfig: Path, selector: dict[str, str]) -> list[str]:
    """The nodes a pool's matchLabels select, as kubectl lists them."""
    labels = ",".join(f"{k}={v}" for k, v in selector.items())
    got = await asyncio.to_thread(_kubectl, kubeconfig, "get", "nodes", "-l", labels, "-o", "name")
    assert got.returncode == 0, got.stderr
    return sorted(line.removeprefix("node/") for line in got.stdout.split())


def _selector(path: Path) -> dict[str, str]:
    body = yaml.safe_load(path.read_text())
    labels: dict[str, str] = body["spec"]["nodeSelector"]["matchLabels"]
    return labels


async def test_the_nvidia_node_pool_has_running_plugin_pods_and_falls_back_on_an_unknown_key(
    api: client.ApiClient, made_cluster: Path
) -> None:
    core = client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in c.NVIDIA_PLUGIN_LABELS.items())
    pods = (await core.list_namespaced_pod(c.NVIDIA_PLUGIN_NAMESPACE, label_selector=selector)).items
    assert sorted(p.spec.node_name for p in pods if pod_running_and_ready(p)) == sorted(
        NVIDIA_NODES + MIG_NODES
    )
    default = {c.RES_NVIDIA_GPU: str(GPUS), c.RES_NVIDIA_GPU_SHARED: "0"}
    node = NVIDIA_NODES[-1]
    await _wait_advertises(api, node, default, label="", config="default")

    # A label naming a key the ConfigMap holds: replicas x GPUs.
    await core.patch_node(node, {"metadata": {"labels": {c.LABEL_NVIDIA_CONFIG: "ts4"}}})
    await _wait_advertises(api, node, {**default, c.RES_NVIDIA_GPU: str(4 * GPUS)}, label="ts4", config="ts4")
    # An unknown key: config-manager exits, its restarts apply the default (gpushare.devcluster.nvidia).
    await core.patch_node(node, {"metadata": {"labels": {c.LABEL_NVIDIA_CONFIG: "late"}}})
    await _wait_advertises(api, node, default, label="late", config="default")
    # The key appears: the crash-looping sidecar's next restart applies it (renamed: .shared).
    cm = {"data": {"late": LATE}}
    await core.patch_namespaced_config_map(c.NVIDIA_CONFIGS_CONFIGMAP, c.NVIDIA_PLUGIN_NAMESPACE, cm)
    shared = {c.RES_NVIDIA_GPU: "0", c.RES_NVIDIA_GPU_SHARED: str(3 * GPUS)}
    await _wait_advertises(api, node, shared, label="late", config="late")
    # The label removed: the default again; the other NVIDIA node never changed.
    await core.patch_node(node, {"metadata": {"labels": {c.LABEL_NVIDIA_CONFIG: None}}})
    await _wait_advertises(api, node, default, label="", config="default")
    await core.patch_namespaced_config_map(
        c.NVIDIA_CONFIGS_CONFIGMAP, c.NVIDIA_PLUGIN_NAMESPACE, {"data": {"late": None}}
    )
    assert (await _advertised(api, NVIDIA_NODES[0]))[0] == default


@pytest.mark.timeout(180)
async def test_the_nvidia_examples_select_their_node_pools_and_end_ready(
    api: client.ApiClient, made_cluster: Path, tmp_path: Path
) -> None:
    # The examples select their own node pools only: each ACK example its two nodes, the NVIDIA
    # examples the NVIDIA pool's nodes and the MIG pool's.
    for pool, example in zip(
        DEMO_POOLS, ("pool-cgpu", "pool-cgpu-no-isolation", "pool-gpu-core"), strict=True
    ):
        selected = await _nodes(made_cluster, _selector(REPO / "examples" / f"{example}.yaml"))
        assert selected == await _nodes(made_cluster, {POOL_LABEL: pool.nodepool_id}), example
    assert await _nodes(made_cluster, _selector(EXAMPLE)) == NVIDIA_NODES
    assert await _nodes(made_cluster, _selector(MIG_EXAMPLE)) == MIG_NODES

    op = launch_operator(made_cluster, tmp_path / "operator.log")
    custom = client.CustomObjectsApi(api)
    names = []
    try:
        op.wait_serving()
        for path in (EXAMPLE, MIG_EXAMPLE):
            body = yaml.safe_load(path.read_text())
            # The one change: the simulator reads the ConfigMaps from the API at once (the kubelet's
            # 59-90 s rewrite of a pod's ConfigMap volume is not simulated, gpushare.devcluster.nvidiasim),
            # so the examples' default wait of 90 s would only wait.
            body["spec"]["nvidia"]["configPropagationSeconds"] = 1
            apply = await asyncio.to_thread(
                _kubectl, made_cluster, "apply", "-f", "-", stdin=yaml.safe_dump(body)
            )
            assert apply.returncode == 0, apply.stderr
            names.append(body["metadata"]["name"])
        ts, mig = names

        def ready(name: str) -> Any:
            async def check() -> dict[str, Any] | None:
                obj: dict[str, Any] = await custom.get_cluster_custom_object(
                    c.GROUP, c.VERSION, c.PLURAL, name
                )
                status = obj.get("status") or {}
                conds = {x["type"]: x for x in status.get("conditions") or []}
                ok = conds.get("Ready", {}).get("status") == "True" and status.get("observedGeneration") == 1
                return status if ok else None

            return check

        status = await wait_for(ready(ts), what=f"pool {ts} Ready", timeout_s=60)
        assert sorted(n["name"] for n in status["nodeStatuses"]) == NVIDIA_NODES
        assert status["capacity"] == {c.RES_NVIDIA_GPU: str(4 * GPUS * len(NVIDIA_NODES))}
        for node in NVIDIA_NODES:
            allocatable, state = await _advertised(api, node)
            assert allocatable[c.RES_NVIDIA_GPU] == str(4 * GPUS), (node, allocatable)
            assert state["config"] == state["label"] == status["schedule"]

        # The MIG pool: every node at success for its config, advertising the geometry's devices,
        # counted per profile in its status and by `gpushare inspect`.
        status = await wait_for(ready(mig), what=f"pool {mig} Ready", timeout_s=90)
        assert sorted(n["name"] for n in status["nodeStatuses"]) == MIG_NODES
        assert status["capacity"] == {r: str(n * len(MIG_NODES)) for r, n in sorted(MIG_DEVICES.items())}
        core = client.CoreV1Api(api)
        for node in MIG_NODES:
            obj = await core.read_node(node)
            labels = obj.metadata.labels or {}
            assert (labels[c.LABEL_MIG_CONFIG], labels[c.LABEL_MIG_CONFIG_STATE]) == (
                status["schedule"],
                "success",
            )
            mig_alloc = {k: int(v) for k, v in (obj.status.allocatable or {}).items() if k in MIG_DEVICES}
            assert mig_alloc == MIG_DEVICES, node
        cli = [sys.executable, "-m", "gpushare", "inspect", "--kubeconfig", str(made_cluster)]
        shown = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        rows = [line for line in shown.stdout.splitlines() if line.strip().startswith(tuple(MIG_NODES))]
        assert len(rows) == len(MIG_NODES), shown.stdout
        for row in rows:
            assert f"{c.RES_NVIDIA_MIG_PREFIX}3g.40gb: 0/{MIG_NODE_POOL.gpus} used" in row, shown.stdout

        for name in names:
            await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)

        async def gone() -> bool:
            items = (await custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL))["items"]
            return not any(i["metadata"]["name"] in names for i in items)

        await wait_for(gone, what=f"pools {names} deleted", timeout_s=60)
        for node in MIG_NODES:  # each node's MIG config given back
            labels = (await core.read_node(node)).metadata.labels or {}
            assert labels.get(c.LABEL_MIG_CONFIG) == MIG_START_CONFIG, (node, labels)
    finally:
        op.stop()
