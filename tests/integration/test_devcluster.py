"""The local control plane behaves like a real cluster where the operator relies on it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for, wait_plugin_ready
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet, plugin_pods_on
from gpushare.devcluster.pluginsim import ANNOTATION_NUDGE, LABEL_SIMULATED, SIMULATED_VALUE
from gpushare.k8s.generated import refused


async def test_version_is_the_pinned_release(api: client.ApiClient) -> None:
    info = await client.VersionApi(api).get_code()
    assert info.git_version == "v1.34.4"
    assert (info.major, info.minor) == ("1", "34")


async def test_fake_gpu_nodes_have_capacity_labels_and_are_ready(
    api: client.ApiClient, fake_nodes: FakeNodeSet
) -> None:
    names = await fake_nodes.create(
        2, pool_labels={POOL_LABEL: "np-x"}, gpus_per_node=4, gpu_mem_gib_per_gpu=24, core_percentage=True
    )
    core = client.CoreV1Api(api)
    for name in names:
        node = await core.read_node(name)
        assert node.status.allocatable[c.RES_GPU_MEM] == "96"
        assert node.status.allocatable[c.RES_GPU_COUNT] == "4"
        assert node.status.capacity[c.RES_GPU_CORE] == "400"
        assert node.metadata.labels[POOL_LABEL] == "np-x"
        assert node.metadata.labels["gpushare"] == "true"
        assert not node.spec.taints
        ready = [cond for cond in node.status.conditions if cond.type == "Ready"]
        assert ready and ready[0].status == "True"


async def test_device_plugin_pod_is_recreated_running_on_the_same_node(
    api: client.ApiClient, fake_nodes: FakeNodeSet
) -> None:
    node_a, node_b = await fake_nodes.create(2, pool_labels={POOL_LABEL: "np-ds"})
    first = await wait_plugin_ready(api, node_a)
    other = await wait_plugin_ready(api, node_b)
    assert first.spec.node_name == node_a
    assert first.metadata.owner_references[0].kind == "DaemonSet"

    await client.CoreV1Api(api).delete_namespaced_pod(first.metadata.name, c.DEFAULT_PLUGIN_NAMESPACE)
    second = await wait_plugin_ready(api, node_a, other_than=first.metadata.uid)
    assert second.metadata.uid != first.metadata.uid
    assert second.spec.node_name == node_a
    assert second.status.phase == "Running"
    # The other node's plugin pod was not touched.
    [still] = await plugin_pods_on(api, node_b)
    assert still.metadata.uid == other.metadata.uid


async def test_a_plugin_pod_kwok_leaves_pending_is_shown_to_it_again(api: client.ApiClient) -> None:
    """kwok can miss a pod bound as it takes its node on (kubernetes-sigs/kwok#1572); pluginsim
    shows such a pod to kwok again. Here kwok never runs the pod (its node is not kwok's), so the
    pod stays Pending and pluginsim's count goes up, once per span, on a simulated node only."""
    core = client.CoreV1Api(api)
    tag = secrets.token_hex(3)
    owner = await core.create_namespaced_config_map(
        c.DEFAULT_PLUGIN_NAMESPACE, cast(Any, {"metadata": {"name": f"nudge-{tag}"}})
    )
    pods = []
    try:
        for name, simulated in ((f"nudge-{tag}", True), (f"nudge-{tag}-real", False)):
            labels = {LABEL_SIMULATED: SIMULATED_VALUE} if simulated else {}
            await core.create_node(cast(Any, {"metadata": {"name": name, "labels": labels}}))
            # a plugin pod (the DaemonSet's labels, so pluginsim follows it) that no DaemonSet
            # adopts: its controller is the ConfigMap, whose deletion takes it away
            ref: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name}
            ref |= {"uid": owner.metadata.uid, "controller": True}
            body = {
                "metadata": {"name": name, "labels": dict(c.DEFAULT_PLUGIN_LABELS), "ownerReferences": [ref]},
                "spec": {"nodeName": name, "containers": [{"name": "p", "image": "none"}]},
            }
            pods.append(await core.create_namespaced_pod(c.DEFAULT_PLUGIN_NAMESPACE, cast(Any, body)))

        async def nudged_twice() -> dict[str, str] | None:
            pod = await core.read_namespaced_pod(pods[0].metadata.name, c.DEFAULT_PLUGIN_NAMESPACE)
            annotations = pod.metadata.annotations or {}
            return annotations if annotations.get(ANNOTATION_NUDGE) == "2" else None

        await wait_for(nudged_twice, what="pluginsim to show the Pending pod to kwok twice", timeout_s=60)
        real = await core.read_namespaced_pod(pods[1].metadata.name, c.DEFAULT_PLUGIN_NAMESPACE)
        assert ANNOTATION_NUDGE not in (real.metadata.annotations or {})  # not a simulated node
        assert real.status.phase == "Pending"
    finally:
        await core.delete_namespaced_config_map(owner.metadata.name, c.DEFAULT_PLUGIN_NAMESPACE)
        for pod in pods:
            with refused(404):
                await core.delete_namespaced_pod(
                    pod.metadata.name, c.DEFAULT_PLUGIN_NAMESPACE, grace_period_seconds=0
                )
            with refused(404):
                await core.delete_node(pod.spec.node_name)


async def test_label_and_field_selectors_on_pods(
    api: client.ApiClient, namespace: str, fake_nodes: FakeNodeSet
) -> None:
    node_a, node_b = await fake_nodes.create(2, pool_labels={POOL_LABEL: "np-sel"})
    core = client.CoreV1Api(api)

    def pod(name: str, node: str, labels: dict[str, str]) -> Any:
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/x:1"}]},
        }

    await core.create_namespaced_pod(namespace, pod("a-gpu", node_a, {"app": "x", "gpu": "yes"}))
    await core.create_namespaced_pod(namespace, pod("a-cpu", node_a, {"app": "x"}))
    await core.create_namespaced_pod(namespace, pod("b-gpu", node_b, {"app": "x", "gpu": "yes"}))

    async def names(**kw: Any) -> list[str]:
        res = await core.list_namespaced_pod(namespace, **kw)
        return sorted(p.metadata.name for p in res.items)

    assert await names(field_selector=f"spec.nodeName={node_a}") == ["a-cpu", "a-gpu"]
    assert await names(label_selector="gpu=yes") == ["a-gpu", "b-gpu"]
    assert await names(label_selector="gpu=yes", field_selector=f"spec.nodeName={node_b}") == ["b-gpu"]
    assert await names(label_selector="app=x,!gpu") == ["a-cpu"]
    assert await names(label_selector="gpu in (yes,maybe)", field_selector=f"spec.nodeName!={node_a}") == [
        "b-gpu"
    ]
    # Across namespaces, as the operator lists pods of a node.
    res = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_b}")
    mine = sorted(p.metadata.name for p in res.items if p.metadata.namespace == namespace)
    assert mine == ["b-gpu"]
    plugin = [p for p in res.items if p.metadata.labels.get("name") == "gpushare-device-plugin-ds"]
    assert len(plugin) == 1

    # kwok runs pods bound to its nodes.
    async def running() -> bool:
        pods = await core.list_namespaced_pod(namespace)
        return all(p.status.phase == "Running" for p in pods.items)

    await wait_for(running, what="test pods to be Running", timeout_s=30)


async def test_node_label_selector_and_pool_labels(api: client.ApiClient, fake_nodes: FakeNodeSet) -> None:
    a = await fake_nodes.create(2, prefix="pa", pool_labels={POOL_LABEL: "np-l1"}, wait_ready=False)
    b = await fake_nodes.create(1, prefix="pb", pool_labels={POOL_LABEL: "np-l2"}, wait_ready=False)
    core = client.CoreV1Api(api)
    res = await core.list_node(label_selector=f"{POOL_LABEL}=np-l1")
    assert sorted(n.metadata.name for n in res.items) == sorted(a)
    res = await core.list_node(label_selector=f"{POOL_LABEL} in (np-l1,np-l2)")
    assert sorted(n.metadata.name for n in res.items) == sorted(a + b)


async def test_scheduler_places_pods_by_gpu_resources(
    api: client.ApiClient, namespace: str, fake_nodes: FakeNodeSet
) -> None:
    """Extended resources are scheduled on: a pod asking for more gpu-mem than any node has stays Pending."""
    [node] = await fake_nodes.create(1, pool_labels={POOL_LABEL: "np-sched"}, gpu_mem_gib_per_gpu=16)
    core = client.CoreV1Api(api)

    def pod(name: str, mem: int) -> Any:
        return {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {POOL_LABEL: "np-sched"},
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/x:1",
                        "resources": {"limits": {c.RES_GPU_MEM: str(mem)}},
                    }
                ],
            },
        }

    await core.create_namespaced_pod(namespace, pod("fits", 8))
    await core.create_namespaced_pod(namespace, pod("too-big", 32))

    async def fits_running() -> bool:
        p = await core.read_namespaced_pod("fits", namespace)
        return p.spec.node_name == node and p.status.phase == "Running"

    await wait_for(fits_running, what="pod 'fits' bound and Running", timeout_s=30)

    async def unschedulable() -> bool:
        p = await core.read_namespaced_pod("too-big", namespace)
        conds = {x.type: x for x in p.status.conditions or []}
        sched = conds.get("PodScheduled")
        return sched is not None and sched.status == "False" and sched.reason == "Unschedulable"

    await wait_for(unschedulable, what="pod 'too-big' to be Unschedulable", timeout_s=30)


# --- teardown after a crash ------------------------------------------------------------

CHILD = """
import json, sys, time
from gpushare.devcluster import DevCluster
dev = DevCluster(sys.argv[1], keep=True)
info = dev.start()
print(json.dumps({"pids": info.pids, "ports": info.ports}), flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_kill_9_of_the_owner_leaves_no_process_and_no_port(tmp_path: Path, cluster: ClusterInfo) -> None:
    # ``cluster`` only ensures the binaries exist (fails clearly otherwise).
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "c")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"child exited with {proc.wait()}; logs in {tmp_path / 'c' / 'logs'}"
            state = json.loads(line)
            pids: dict[str, int] = state["pids"]
            ports: dict[str, int] = state["ports"]
            assert set(pids) == {
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
                "pluginsim",
            }
            assert not any(_gone(p) for p in pids.values())
            assert not any(_port_free(p) for name, p in ports.items() if name != "etcd-peer")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids.values()) and all(_port_free(p) for p in ports.values()):
            break
        time.sleep(0.2)
    alive = {n: p for n, p in pids.items() if not _gone(p)}
    bound = {n: p for n, p in ports.items() if not _port_free(p)}
    assert not alive, f"orphans after kill -9: {alive}"
    assert not bound, f"ports still bound after kill -9: {bound}"


# --- python -m gpushare.devcluster up/env/down (make cluster / cluster-down) ----------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpushare.devcluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cli_up_env_down(tmp_path: Path, cluster: ClusterInfo) -> None:
    repo = Path(__file__).resolve().parents[2]
    d = tmp_path / "cl"
    crd = repo / "crds" / "gpushare.io_gpusharepools.yaml"
    up = _cli("up", "--dir", str(d), "--nodes", "1", "--pools", "2", f"--crd={crd}", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={d / 'kubeconfig'}" in up.stdout
        assert (
            _cli("env", "--dir", str(d), cwd=tmp_path).stdout.strip()
            == f"export KUBECONFIG={d / 'kubeconfig'}"
        )
        again = _cli("up", "--dir", str(d), cwd=tmp_path)
        assert again.returncode == 0 and "already running" in again.stderr
        info = json.loads((d / "cluster.json").read_text())
        env = {**os.environ, "KUBECONFIG": str(d / "kubeconfig")}
        nodes = subprocess.run(
            ["kubectl", "get", "nodes", "-L", POOL_LABEL, "--no-headers"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert sorted(line.split()[-1] for line in nodes.splitlines()) == ["np-a", "np-b"]
        gsp = subprocess.run(
            ["kubectl", "get", "gsp"], env=env, capture_output=True, text=True, timeout=60
        )  # fmt: skip
        assert gsp.returncode == 0, gsp.stderr
    finally:
        down = _cli("down", "--dir", str(d), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert all(_gone(p) for p in info["pids"].values())
    assert not (d / "kubeconfig").exists()
    assert _cli("env", "--dir", str(d), cwd=tmp_path).returncode == 1


def _listening(pid: int) -> list[str]:
    """Local addresses (hex ip:port from /proc/net/tcp*) of the sockets ``pid`` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                out.append(fields[1])
    return out


def test_every_component_listens_on_loopback_only(cluster: ClusterInfo) -> None:
    loopback_v4 = "0100007F"  # 127.0.0.1, little-endian hex
    loopback_v6 = "00000000000000000000000001000000"  # ::1
    seen = {}
    for name, pid in cluster.pids.items():
        addrs = _listening(pid)
        seen[name] = addrs
        for addr in addrs:
            ip = addr.split(":")[0]
            assert ip in (loopback_v4, loopback_v6), f"{name} listens on {addr} (not loopback)"
    assert seen["kube-apiserver"] and seen["etcd"] and seen["kwok"]
    assert not seen["kube-controller-manager"] and not seen["kube-scheduler"]  # --secure-port=0
