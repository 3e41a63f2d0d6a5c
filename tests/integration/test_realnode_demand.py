"""Lending on the real node (issue 23; the real-node tier of tests/integration/test_realnode.py).

``realnode-0`` (a real kubelet, containerd, the project's device plugin) is the one node of pool
``rn-lender`` (cgpu); a kwok node, full, is the core_mem pool ``rn-core``'s. A core Job waits;
the lender lends the real node: its labels switch to core_mem, its real plugin pod restarts and
advertises gpu-core, the Job runs in a real container there and gets ACK's environment; when it is
done and ``returnAfterSeconds`` has passed, the node goes back to cgpu (another plugin restart).
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import wait_for
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes, delete_nodes, plugin_pods_on
from gpushare.devcluster.realnode import IMAGE_WORKLOAD
from integration.test_realnode import (  # the real-node tier's module fixtures and helpers
    NODE,
    WAIT,
    Pools,
    env_of,
    node_status,
    ns,
    plugin_pod,
    pools,
    rapi,
    real_cluster,
    real_operator,
)

pytestmark = pytest.mark.realnode
__all__ = ["ns", "pools", "rapi", "real_cluster", "real_operator"]  # fixtures, imported to be used here


async def test_the_real_node_is_lent_to_a_waiting_core_job_runs_it_and_goes_back(
    rapi: client.ApiClient, pools: Pools, ns: str
) -> None:
    core = client.CoreV1Api(rapi)
    batch = client.BatchV1Api(rapi)
    shape: dict[str, Any] = {"simulate_plugin": True, "gpus_per_node": 1, "gpu_mem_gib_per_gpu": 16}
    (kwok,) = await create_gpu_nodes(
        rapi, 1, prefix="rn-core-kwok", pool_labels={POOL_LABEL: "np-rn-core"}, **shape
    )
    try:
        await pools.create("rn-lender")  # the real node's pool (np-real), cgpu
        await pools.create_pool("rn-core", {POOL_LABEL: "np-rn-core"}, computeAllocation=True)
        await pools.wait_ready("rn-lender")
        await pools.wait_ready("rn-core")
        limits = {c.RES_GPU_MEM: "16", c.RES_GPU_CORE: "100"}
        fill = {"name": "c", "image": "registry.invalid/fill:fake", "resources": {"limits": limits}}
        body = {"metadata": {"name": "fill"}, "spec": {"nodeName": kwok, "containers": [fill]}}
        await core.create_namespaced_pod(ns, cast(Any, body))
        plugin_before = (await plugin_pod(rapi)).metadata.uid

        container = {
            "name": "main",
            "image": IMAGE_WORKLOAD,
            "imagePullPolicy": "Never",
            "resources": {
                "limits": {"cpu": "100m", "memory": "32Mi", c.RES_GPU_MEM: "4", c.RES_GPU_CORE: "50"}
            },
        }
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "core-job"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {c.LABEL_POOL: "rn-core"},
                        "containers": [container],
                    }
                },
            },
        }
        await batch.create_namespaced_job(ns, cast(Any, job))

        async def demand() -> dict[str, Any] | None:
            obj = await pools.get("rn-core") or {}
            d = (obj.get("status") or {}).get("demand") or {}
            return d if d.get("pendingPods") == 1 else None

        await wait_for(demand, what="rn-core's status.demand naming the waiting Job", timeout_s=WAIT)
        await pools.patch_spec(
            "rn-lender", {"lending": {"to": ["rn-core"], "keepIdle": 0, "returnAfterSeconds": 30}}
        )

        # The loan: recorded on the node before anything moves, kept until returnAfterSeconds after
        # the Job (so it is there to be seen now, not only by luck after the Job).
        async def lent() -> dict[str, Any] | None:
            n = await core.read_node(NODE)
            loan = (n.metadata.annotations or {}).get(c.ANNOTATION_LOAN)
            return cast(dict[str, Any], json.loads(loan)) if loan else None

        loan = await wait_for(lent, what=f"the loan annotation on {NODE}", timeout_s=WAIT)
        assert (loan["from"], loan["to"]) == ("rn-lender", "rn-core"), loan

        # Its real plugin pod restarts into core_mem: the old pod is gone (terminating or not)
        # once the node advertises gpu-core.
        async def core_mem() -> bool:
            _, alloc = await node_status(core)
            return alloc.get(c.RES_GPU_CORE) == "100"

        await wait_for(core_mem, what=f"{NODE} advertising gpu-core", timeout_s=WAIT)
        uids = {p.metadata.uid for p in await plugin_pods_on(rapi, NODE)}
        assert plugin_before not in uids, (plugin_before, uids)
        assert (await plugin_pod(rapi)).metadata.uid != plugin_before

        async def done() -> Any:
            j = await batch.read_namespaced_job("core-job", ns)
            if j.status.failed:
                raise AssertionError(f"job failed: {j.status}")
            return j if j.status.succeeded else None

        await wait_for(done, what=f"the core Job to complete on the lent {NODE}", timeout_s=WAIT)
        (pod,) = (await core.list_namespaced_pod(ns, label_selector="job-name=core-job")).items
        assert pod.spec.node_name == NODE
        env = env_of(await core.read_namespaced_pod_log(pod.metadata.name, ns))
        assert env.get("ALIYUN_COM_GPU_MEM_CONTAINER") == "4", env

        async def back() -> bool:
            n = await core.read_node(NODE)
            labels, annotations = n.metadata.labels or {}, n.metadata.annotations or {}
            _, alloc = await node_status(core)
            return (
                labels.get(c.LABEL_POOL) == "rn-lender"
                and labels.get(c.LABEL_SCHEDULE) == "cgpu"
                and c.ANNOTATION_LOAN not in annotations
                and alloc.get(c.RES_GPU_CORE, "0") == "0"
                and alloc.get(c.RES_GPU_MEM) == "16"
            )

        await wait_for(back, what=f"{NODE} back in rn-lender, its plugin in cgpu", timeout_s=WAIT)
        await pools.wait_ready("rn-lender")
        events = await core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={NODE}")
        reasons = {e.reason for e in events.items}
        assert {"NodeLent", "LoanReturned"} <= reasons, reasons
    finally:
        await core.delete_namespaced_pod("fill", ns, grace_period_seconds=0)
        await delete_nodes(rapi, [kwok])
