"""`gpushare inspect` against the real apiserver: nodes, pods and a pool read live."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import client

from gpushare import agent as agent_loop
from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.isolation import IsolationPaths

MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


def _gpu_pod(
    name: str, mem: int, *, node: str = "", selector: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "cuda", "image": "cuda-sample", "resources": {"limits": {c.RES_GPU_MEM: str(mem)}}}
        ],
        "tolerations": [{"operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _inspect(cluster: ClusterInfo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpushare", "inspect", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_inspect_live(
    cluster: ClusterInfo, api: client.ApiClient, fake_nodes: FakeNodeSet, namespace: str, tmp_path: Path
) -> None:
    np = f"np-insp-{secrets.token_hex(3)}"
    pool_name = f"insp-{secrets.token_hex(3)}"
    n0, n1 = await fake_nodes.create(2, pool_labels={POOL_LABEL: np}, gpus_per_node=2, gpu_mem_gib_per_gpu=15)

    # the agent publishes isolation on n0 (absent) and nothing on n1
    (tmp_path / "modules").write_text("nvidia 1 0 - Live 0x0\n")
    paths = IsolationPaths(proc_modules=tmp_path / "modules", proc_cgpu=tmp_path / "none")
    nvml = FakeNVML(gpus=[FakeGPU(name="Tesla V100-SXM2-16GB", memory_mib=16160)] * 2)
    assert await agent_loop.run_agent(api, n0, nvml, paths=paths, once=True) == 0

    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": pool_name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: np}}, "memoryIsolation": True},
    }
    await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
    try:
        status = {
            "schedule": "cgpu",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "NodesDegraded",
                    "message": "1 node degraded",
                    "lastTransitionTime": "2026-11-29T12:00:00Z",
                }
            ],
            "nodeStatuses": [
                {"name": n0, "phase": "Degraded", "reason": "IsolationUnavailable"},
                {"name": n1, "phase": "Ready"},
            ],
        }
        await custom.patch_cluster_custom_object_status(
            c.GROUP, c.VERSION, c.PLURAL, pool_name, {"status": status}, **MERGE
        )

        core = client.CoreV1Api(api)
        await core.create_namespaced_pod(namespace, cast(Any, _gpu_pod("train-a", 4, node=n0)))
        await core.create_namespaced_pod(namespace, cast(Any, _gpu_pod("train-b", 6, node=n0)))
        await core.create_namespaced_pod(
            namespace, cast(Any, _gpu_pod("too-big", 100, selector={POOL_LABEL: np}))
        )

        async def unschedulable() -> bool:
            p = await core.read_namespaced_pod("too-big", namespace)
            return any(
                cond.type == "PodScheduled" and cond.status == "False" for cond in (p.status.conditions or [])
            )

        await wait_for(unschedulable, what="the scheduler to report too-big unschedulable", timeout_s=60)

        proc = await asyncio.to_thread(_inspect, cluster, "-o", "json", pool_name)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        (section,) = report["pools"]
        assert section["name"] == pool_name
        assert section["mode"] == "cgpu"
        assert section["ready"] == "False (NodesDegraded)"
        by_name = {n["name"]: n for n in section["nodes"]}
        assert set(by_name) == {n0, n1}
        assert by_name[n0]["isolation"] == "absent"
        assert by_name[n1]["isolation"] == "no agent"
        assert by_name[n0]["gpuMem"] == {"allocated": 10, "total": 30}
        assert by_name[n1]["gpuMem"] == {"allocated": 0, "total": 30}
        assert by_name[n0]["gpus"] == 2
        assert by_name[n0]["gpuMemoryMiB"] == [16160, 16160]
        assert (by_name[n0]["phase"], by_name[n0]["reason"]) == ("Degraded", "IsolationUnavailable")
        assert sorted(p["name"] for p in by_name[n0]["pods"]) == ["train-a", "train-b"]
        assert section["totals"]["gpuMem"] == {"allocated": 10, "total": 60}
        (pending,) = section["pending"]
        assert (pending["name"], pending["gpuMem"]) == ("too-big", 100)
        assert f"Insufficient {c.RES_GPU_MEM}" in pending["message"]  # the scheduler's own words

        text = await asyncio.to_thread(_inspect, cluster, "-d", pool_name)
        assert text.returncode == 0, text.stderr
        assert f"POOL {pool_name}  mode=cgpu (memory isolation)" in text.stdout
        assert "Degraded (IsolationUnavailable)" in text.stdout
        assert f"{namespace}/train-a" in text.stdout
        assert "PENDING: 1 GPU pod(s) not yet scheduled whose node selector targets this pool" in text.stdout
    finally:
        await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, pool_name)
