"""An operator that starts before the apiserver serves its CRD, or before the apiserver answers at
all: it waits, then serves the pools.

Kopf resolves GPUSharePools once, when it starts, and again only when a CRD changes: a replica
started while the kube-apiserver was starting found the group not yet in discovery, and never
served a pool, though it ran on (the soak, seed 7: its gauges stayed empty; "Unresolved resources
cannot be served" in its log). ``gpushare run`` now waits, at startup, until discovery lists what
it watches. Here the CRD is not installed at all when the operator starts, on a control plane of
the test's own (the session's has the CRD): the operator says what it waits for, Kopf never
scans before the CRD is served, and a pool created once it is gets reconciled.

The same wait covers an apiserver that does not answer at all (killed, restarting): the startup
raised there before, and Kopf tried it again only a minute later, so a webhook process started
then refused every GPU pod for that minute under failurePolicy Fail (the soak, seed 315).
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
from support.operator_proc import OperatorProc, launch_operator, launch_webhook

CRD = Path(__file__).resolve().parents[2] / "crds" / "gpushare.io_gpusharepools.yaml"
WAITING = "Waiting for the API server to serve what the operator watches"
#: Kopf's line for a startup handler that raised (it is tried again a minute later)
RETRIED = "will try again"


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
    return await _create_pool(info)


async def _create_pool(info: ClusterInfo) -> dict[str, Any]:
    async with await make_api_client(str(info.kubeconfig)) as api:
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


def test_an_operator_and_a_webhook_started_while_the_apiserver_is_down_wait_for_it(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    dev = DevCluster(plugin_sim=False)
    info = dev.start()
    asyncio.run(_install_crd_and_namespace(info, "gpushare-startup"))
    dev.kill("kube-apiserver")  # a restart: etcd keeps the CRD
    op = launch_operator(info.kubeconfig, tmp_path / "operator.log")
    webhook, _, webhook_log = launch_webhook(
        info.kubeconfig, tmp_path, "gpushare-startup", "gpushare-startup"
    )
    try:
        said = _wait_log(op, WAITING)
        assert said["missing"] == [f"{c.PLURAL}.{c.GROUP}/{c.VERSION}"]
        _wait_text(webhook_log, "for the API server to serve gpusharepools.gpushare.io/v1alpha1")
        dev.restart("kube-apiserver")
        pool = asyncio.run(_create_pool(info))
        ready = next(x for x in pool["status"]["conditions"] if x["type"] == "Ready")
        assert ready["reason"] == "NoMatchingNodes"  # reconciled by the operator, from its spec
        asyncio.run(_webhook_registered(info, "gpushare-startup"))
        assert webhook.poll() is None, webhook_log.read_text()[-3000:]
        # neither startup raised and waited for Kopf's retry a minute later
        assert not [e for e in op.logs() if RETRIED in str(e.get("event", ""))], op.log_path.read_text()[
            -3000:
        ]
        assert RETRIED not in webhook_log.read_text(), webhook_log.read_text()[-3000:]
    finally:
        op.stop()
        webhook.terminate()
        webhook.wait(20)
        dev.stop()


def _wait_text(log: Path, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {timeout_s:g}s:\n{log.read_text()[-3000:] if log.exists() else ''}")


async def _install_crd_and_namespace(info: ClusterInfo, namespace: str) -> None:
    async with await make_api_client(str(info.kubeconfig)) as api:
        await install_crd_files(api, [CRD])
        body = {"metadata": {"name": namespace}}
        await client.CoreV1Api(api).create_namespace(body)  # type: ignore[arg-type]


async def _webhook_registered(info: ClusterInfo, name: str, timeout_s: float = 60) -> None:
    async with await make_api_client(str(info.kubeconfig)) as api:
        adm = client.AdmissionregistrationV1Api(api)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await adm.read_validating_webhook_configuration(name)
                return
            except client.ApiException as exc:
                if exc.status != 404 or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(0.5)
