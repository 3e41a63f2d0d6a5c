"""An operator that starts before the apiserver serves its CRD: it waits, then serves the pools.

Kopf resolves GPUSharePools once, when it starts, and again only when a CRD changes: a replica
started while the kube-apiserver was starting found the group not yet in discovery, and never
served a pool, though it ran on (the soak, seed 7: its gauges stayed empty; "Unresolved resources
cannot be served" in its log). ``gpushare run`` now waits, at startup, until discovery lists what
it watches. Here the CRD is not installed at all when the operator starts, on a control plane of
the test's own (the session's has the CRD): the operator says what it waits for, Kopf never
scans before the CRD is served, and a pool created once it is gets reconciled.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster
from gpushare.devcluster.crds import install_crd_files
from gpushare.k8s.client import make_api_client
from support.operator_proc import OperatorProc, launch_operator

CRD = Path(__file__).resolve().parents[2] / "crds" / "gpushare.io_gpusharepools.yaml"
WAITING = "Waiting for the API server to serve what the operator watches"


def _wait_log(op: OperatorProc, event: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [e for e in op.logs() if str(e.get("event", "")).startswith(event)]
        if found:
            return found[0]
        assert op.proc.poll() is None, op.log_path.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {event!r} in {timeout_s:g}s:\n{op.log_path.read_text()[-3000:]}")


async def _install_and_create_pool(info: ClusterInfo) -> dict[str, Any]:
    async with await make_api_client(str(info.kubeconfig)) as api:
        await install_crd_files(api, [CRD])
        custom = client.CustomObjectsApi(api)
        body = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": "late"},
            "spec": {"nodeSelector": {"matchLabels": {"np": "none"}}, "memoryIsolation": True},
        }
        await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pool: dict[str, Any] = await custom.get_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, "late"
            )
            conditions = {x["type"]: x for x in (pool.get("status") or {}).get("conditions") or []}
            if "Ready" in conditions:
                return pool
            await asyncio.sleep(0.5)
        raise AssertionError(f"GPUSharePool/late got no status in 60s: {pool}")


def test_an_operator_started_before_its_crd_is_served_waits_then_serves_pools(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    dev = DevCluster(plugin_sim=False)
    info = dev.start()
    op = launch_operator(info.kubeconfig, tmp_path / "operator.log")
    try:
        said = _wait_log(op, WAITING)
        assert said["missing"] == [f"{c.PLURAL}.{c.GROUP}/{c.VERSION}"]
        pool = asyncio.run(_install_and_create_pool(info))
        ready = next(x for x in pool["status"]["conditions"] if x["type"] == "Ready")
        assert ready["reason"] == "NoMatchingNodes"  # reconciled by the operator, from its spec
        _wait_log(op, "APIs served")
        events = [str(e.get("event", "")) for e in op.logs()]
        assert not [e for e in events if "Unresolved resources" in e]  # Kopf scanned once it was served
    finally:
        op.stop()
        dev.stop()
