"""``gpushare webhook``: the admission webhook in a process of its own, as the chart runs it.

The process is started on the session cluster in local mode (it registers
https://127.0.0.1:<port>/<handler-id> under a configuration of its own) with no operator running
anywhere: what it knows of pools and nodes comes from its own GPUSharePool index and Node
list-watch. Requests go through the real kube-apiserver (server-side dry runs).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpushare.devcluster import ClusterInfo
from support.kube import Kube, Response
from support.operator_proc import launch_webhook

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
SUFFIX = secrets.token_hex(3)
NS = f"gpushare-process-{SUFFIX}"  # the webhook's own (its Secret; never judged)
USER_NS = f"process-{SUFFIX}"
CONFIG = f"gpushare-webhook-process-{SUFFIX}"
POOL = f"wp-{SUFFIX}"
NODE = f"wp-{SUFFIX}-node"


@dataclass
class Process:
    kube: Kube
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log: Path


def _pod(limits: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{secrets.token_hex(3)}", "namespace": USER_NS, "labels": labels or {}},
        "spec": {
            "nodeSelector": {"gpushare.io/pool": POOL},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


def _until(kube: Kube, obj: dict[str, Any], done: Any, what: str, proc: subprocess.Popen[bytes]) -> Response:
    deadline = time.monotonic() + 90
    while True:
        r = kube.create(obj)
        if done(r):
            return r
        assert proc.poll() is None, f"gpushare webhook exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{what}: {r.status} {r.message}"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def process(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    kube = Kube(cluster)
    pool = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": POOL},
        "spec": {"nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-{POOL}"}}},
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {"alibabacloud.com/nodepool-id": f"np-{POOL}"}},
    }
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in (NS, USER_NS)]
    for obj in (*namespaces, pool, node):
        r = kube.create(obj, dry_run=False)
        assert r.status == 201, r.body
    workdir = tmp_path_factory.mktemp("webhook-process")
    proc, metrics_port, log = launch_webhook(cluster.kubeconfig, workdir, NS, CONFIG)
    try:
        yield Process(kube, proc, metrics_port, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        kube.request(
            "DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG}"
        )
        kube.delete(pool)
        kube.delete(node)
        for ns in (NS, USER_NS):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_it_judges_pods_through_the_apiserver_with_no_operator_running(process: Process) -> None:
    r = _until(
        process.kube,
        _pod({MEM: "2", CORE: "33"}),
        lambda r: r.status == 422 and "admission webhook" in r.message,
        "the webhook process never answered",
        process.proc,
    )
    assert "GS001-core-percentage-step" in r.message and "use 30 or 35" in r.message, r.message
    assert process.kube.create(_pod({MEM: "2"})).status == 201


def test_its_own_node_watch_and_pool_index_give_the_rules_their_context(process: Process) -> None:
    """GS016 needs the pool (its index) and the node's GPU count (its Node watch)."""
    eight = _pod({MEM: "16"}, {"aliyun.com/gpu-count": "8"})
    status = {"status": {"allocatable": {"aliyun.com/gpu-count": "4", MEM: "60"}}}
    r = process.kube.request(
        "PATCH", f"/api/v1/nodes/{NODE}/status", status, content_type="application/merge-patch+json"
    )
    assert r.status == 200, r.message
    r = _until(
        process.kube, eight, lambda r: r.status == 403, "the node's GPU count never reached it", process.proc
    )
    assert f"no node of pool {POOL} has more than 4 GPUs" in r.message, r.message
    assert "(rule GS016-gpu-count-exceeds-node)" in r.message, r.message
    assert process.kube.create(_pod({MEM: "16"}, {"aliyun.com/gpu-count": "4"})).status == 201


def test_it_exports_its_admission_metrics(process: Process) -> None:
    """Its own /metrics counts its own denials (a 33 % pod denied here, whatever ran before)."""
    _until(
        process.kube,
        _pod({MEM: "2", CORE: "33"}),
        lambda r: r.status == 422 and "admission webhook" in r.message,
        "the webhook process never answered",
        process.proc,
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert (
        'gpushare_admission_requests_total{decision="denied",kind="Pod",rule="GS001-core-percentage-step"}'
        in text
    )


def test_sigterm_stops_it_and_local_mode_removes_its_configuration(process: Process) -> None:
    os.killpg(process.proc.pid, signal.SIGTERM)
    assert process.proc.wait(timeout=60) == 0, process.log.read_text()[-3000:]
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG}"
    assert process.kube.request("GET", path).status == 404
