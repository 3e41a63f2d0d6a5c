"""The operator (``gpushare run``, a real subprocess) against the real control plane (issue 4).

Fixtures:

- ``start_operator()``: starts ``gpushare run --kubeconfig <cluster>`` (JSON logs to a file,
  metrics on a free port) and returns an ``OperatorProc``; every one started is stopped at the end.
- ``operator``: one started operator.
- ``pools``: creates/patches/deletes GPUSharePools; at teardown (while the operator still runs)
  deletes every pool it created and waits until the finalizer is gone.
- helpers to read nodes, plugin pods and events.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet

MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


@dataclass
class OperatorProc:
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int

    def metrics(self) -> dict[str, float]:
        """The operator's gpushare_* samples, ``name{labels}`` → value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("gpushare_"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def sum_metric(self, prefix: str, **labels: str) -> float:
        total = 0.0
        for key, value in self.metrics().items():
            if not key.startswith(prefix + "{") and key != prefix:
                continue
            if all(f'{k}="{v}"' in key for k, v in labels.items()):
                total += value
        return total

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture
def start_operator(cluster: ClusterInfo, tmp_path: Path) -> Iterator[Callable[..., OperatorProc]]:
    started: list[OperatorProc] = []

    def start(*extra: str) -> OperatorProc:
        log_path = tmp_path / f"operator-{len(started)}.log"
        port = free_port()
        cmd = [
            sys.executable, "-m", "gpushare", "run",
            "--kubeconfig", str(cluster.kubeconfig),
            "--metrics-port", str(port),
            "--log-format", "json",
            *extra,
        ]  # fmt: skip
        with log_path.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
        op = OperatorProc(proc, log_path, port)
        started.append(op)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(
                    f"gpushare run exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
                )
            try:
                op.metrics()
                return op
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"gpushare run did not serve metrics in 30s:\n{log_path.read_text()[-3000:]}")

    yield start
    for op in started:
        op.stop()


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProc]) -> OperatorProc:
    return start_operator()


def np_id() -> str:
    return f"np-{secrets.token_hex(3)}"


@dataclass
class Pools:
    api: client.ApiClient
    created: list[str] = field(default_factory=list)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    async def create(self, name: str, nodepool: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: nodepool}}, **spec},
        }
        obj: dict[str, Any] = await self.custom.create_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, body
        )
        self.created.append(name)
        return obj

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.custom.get_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        await self.custom.patch_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, name, {"spec": spec}, **MERGE
        )

    async def delete(self, name: str, *, wait: bool = True, timeout_s: float = 60) -> None:
        try:
            await self.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        if wait:

            async def gone() -> bool:
                return await self.get(name) is None

            await wait_for(
                gone, what=f"GPUSharePool {name} to be deleted (finalizer removed)", timeout_s=timeout_s
            )

    async def condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        obj = await self.get(name)
        for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return dict(cond)
        return None

    async def wait_condition(
        self, name: str, ctype: str, status: str, reason: str | None = None, timeout_s: float = 60
    ) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            cond = await self.condition(name, ctype)
            if cond and cond["status"] == status and (reason is None or cond["reason"] == reason):
                return cond
            return None

        what = f"GPUSharePool {name} {ctype}={status}" + (f" ({reason})" if reason else "")
        result: dict[str, Any] = await wait_for(check, what=what, timeout_s=timeout_s)
        return result


@pytest.fixture
async def pools(api: client.ApiClient, operator: OperatorProc) -> AsyncIterator[Pools]:
    helper = Pools(api)
    yield helper
    for name in helper.created:
        try:
            await helper.delete(name, timeout_s=45)
        except TimeoutError:
            # Leave the cluster usable for the next test even if cleanup is stuck.
            await helper.custom.patch_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, name, {"metadata": {"finalizers": None}}, **MERGE
            )
            raise


async def node_labels(api: client.ApiClient, name: str) -> dict[str, str]:
    node = await client.CoreV1Api(api).read_node(name)
    return dict(node.metadata.labels or {})


async def node_obj(api: client.ApiClient, name: str) -> Any:
    return await client.CoreV1Api(api).read_node(name)


def managed(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k in c.MANAGED_LABELS}


def foreign(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in c.MANAGED_LABELS}


async def wait_labels(
    api: client.ApiClient, nodes: list[str], expected: dict[str, str | None], timeout_s: float = 60
) -> None:
    """Wait until every node has ``expected`` managed labels (None = absent)."""

    async def check() -> bool:
        for name in nodes:
            labels = await node_labels(api, name)
            for key, value in expected.items():
                if labels.get(key) != value:
                    return False
        return True

    await wait_for(check, what=f"labels {expected} on {nodes}", timeout_s=timeout_s)


async def plugin_pod_uids(api: client.ApiClient, node: str) -> set[str]:
    selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        c.DEFAULT_PLUGIN_NAMESPACE, label_selector=selector, field_selector=f"spec.nodeName={node}"
    )
    return {p.metadata.uid for p in pods.items if p.metadata.deletion_timestamp is None}


def restart_record(node: Any) -> dict[str, Any] | None:
    raw = (node.metadata.annotations or {}).get(c.ANNOTATION_PLUGIN_RESTART)
    return json.loads(raw) if raw else None


async def wait_restarts_done(api: client.ApiClient, nodes: list[str], timeout_s: float = 60) -> None:
    async def check() -> bool:
        for name in nodes:
            record = restart_record(await node_obj(api, name))
            if record is None or record["state"] != "Done":
                return False
        return True

    await wait_for(check, what=f"device plugin restarts Done on {nodes}", timeout_s=timeout_s)


async def pool_events(api: client.ApiClient, pool: str, namespace: str = "default") -> list[Any]:
    events = await client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind={c.KIND},involvedObject.name={pool}"
    )
    return list(events.items)


async def wait_event(api: client.ApiClient, pool: str, reason: str, timeout_s: float = 30) -> Any:
    async def check() -> Any:
        for event in await pool_events(api, pool):
            if event.reason == reason:
                return event
        return None

    return await wait_for(check, what=f"Event {reason} on GPUSharePool {pool}", timeout_s=timeout_s)


async def gpu_pod(
    api: client.ApiClient,
    namespace: str,
    node: str,
    name: str = "gpu-job",
    mem: int = 2,
    labels: dict[str, str] | None = None,
) -> str:
    """A running pod using aliyun.com/gpu-mem, bound directly to ``node`` (kwok runs it)."""
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.invalid/cuda-sample:fake",
                    "resources": {"limits": {c.RES_GPU_MEM: str(mem)}},
                }
            ],
        },
    }
    await core.create_namespaced_pod(namespace, body)

    async def running() -> bool:
        pod = await core.read_namespaced_pod(name, namespace)
        return bool(pod.status.phase == "Running")

    await wait_for(running, what=f"pod {namespace}/{name} Running on {node}", timeout_s=30)
    return name


async def settle(seconds: float = 1.0) -> None:
    await asyncio.sleep(seconds)


# --- tests -------------------------------------------------------------------------------------

CGPU = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "false",
    c.LABEL_SCHEDULE: "cgpu",
    c.LABEL_PLACEMENT: "binpack",
}
SHARE = {
    c.LABEL_CGPU: "true",
    c.LABEL_DISABLE_ISOLATION: "true",
    c.LABEL_SCHEDULE: "share",
    c.LABEL_PLACEMENT: "binpack",
}


async def test_seed_scenario_labels_plugins_status_and_restore(
    api: client.ApiClient, fake_nodes: FakeNodeSet, operator: OperatorProc, pools: Pools
) -> None:
    np_iso, np_noiso = np_id(), np_id()
    iso = await fake_nodes.create(2, prefix="cgpu", pool_labels={POOL_LABEL: np_iso}, gpus_per_node=2,
                                  extra_labels={"team": "vision"})  # fmt: skip
    noiso = await fake_nodes.create(2, prefix="share", pool_labels={POOL_LABEL: np_noiso}, gpus_per_node=1)
    before = {n: await node_labels(api, n) for n in iso + noiso}
    plugins_before = {n: await plugin_pod_uids(api, n) for n in iso + noiso}
    assert all(plugins_before.values()), "the stand-in DaemonSet runs a plugin pod on every fake GPU node"

    p_iso, p_noiso = f"cgpu-{np_iso}", f"cgpu-no-isolation-{np_noiso}"
    await pools.create(p_iso, np_iso)
    await pools.create(p_noiso, np_noiso, memoryIsolation=False)

    await wait_labels(api, iso, {**CGPU, c.LABEL_POOL: p_iso})
    await wait_labels(api, noiso, {**SHARE, c.LABEL_POOL: p_noiso})
    await wait_restarts_done(api, iso + noiso)
    await pools.wait_condition(p_iso, "Ready", "True", "AllNodesReady")
    await pools.wait_condition(p_noiso, "Ready", "True", "AllNodesReady")

    for n in iso + noiso:
        labels = await node_labels(api, n)
        assert foreign(labels) == foreign(before[n]), f"foreign labels of {n} changed"
        now_uids = await plugin_pod_uids(api, n)
        assert now_uids and not (now_uids & plugins_before[n]), f"plugin pod on {n} was not replaced"

    obj = await pools.get(p_iso)
    assert obj is not None
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["mode"] == "cgpu"
    assert status["nodes"]["matched"] == 2 and status["nodes"]["ready"] == 2
    assert status["capacity"] == {"gpus": 4, "gpuMemGiB": 64, "gpuCorePercentage": 0}
    noiso_status = (await pools.get(p_noiso) or {})["status"]
    assert noiso_status["capacity"] == {"gpus": 2, "gpuMemGiB": 32, "gpuCorePercentage": 0}
    reasons = {e.reason for e in await pool_events(api, p_iso)}
    assert {"LabelsApplied", "DevicePluginRestarted"} <= reasons

    # One label patch per changed node: 4 nodes, 4 label patches, no more.
    assert operator.sum_metric("gpushare_label_patches_total") == 4

    # Deletion restores: no prior schedule -> "default", the rest removed; foreign labels intact.
    await pools.delete(p_iso)
    for n in iso:
        labels = await node_labels(api, n)
        assert managed(labels) == {c.LABEL_SCHEDULE: "default"}
        assert foreign(labels) == foreign(before[n])
        annotations = (await node_obj(api, n)).metadata.annotations or {}
        assert c.ANNOTATION_OWNED not in annotations
    await wait_event(api, p_iso, "CleanupDone")
