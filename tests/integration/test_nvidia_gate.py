"""The NVIDIA gate, for real: a cluster with no NVIDIA pool pays nothing for its ``nvidia.com/gpu`` pods.

As the chart runs them: ``gpushare webhook`` (here in local mode, under a configuration of its own)
and ``gpushare run`` (the operator, ``--webhook-configuration`` naming that configuration), two
processes on the session cluster. Requests go through the real kube-apiserver (server-side dry
runs); whether the apiserver sent a pod to the webhook is read from the webhook process's own
``gpushare_admission_requests_total`` (it counts every review before it answers).

* with no NVIDIA pool, a pod asking for ``nvidia.com/gpu`` with a nodeSelector is admitted without
  reaching the webhook (the shipped condition: the gate is closed);
* once an NVIDIA pool exists the operator opens the gate: a pod asking for two shared GPUs of a
  ``failRequestsGreaterThanOne`` pool is denied (GS019), and one asking for a MIG device on that
  TimeSlicing pool (GS009), as ``gpushare check`` denies it;
* once the pool is deleted the operator closes the gate again: such pods are no longer sent.
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

from gpushare.admission import Context, evaluate
from gpushare.admission.gate import gate_of, is_nvidia_pool
from gpushare.admission.webhook_config import TARGETS_BY_ID
from gpushare.api.v1alpha1 import parse_pool
from gpushare.devcluster import ClusterInfo
from support.kube import Kube, Response
from support.operator_proc import OperatorProc, launch_operator, launch_webhook, sum_samples

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
SUFFIX = secrets.token_hex(3)
NS = f"gpushare-gate-{SUFFIX}"  # the webhook's own (its Secret; never judged)
USER_NS = f"gate-{SUFFIX}"
CONFIG = f"gpushare-webhook-gate-{SUFFIX}"
CONFIG_PATH = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG}"
POOL = f"ts-{SUFFIX}"
POOLS_PATH = "/apis/gpushare.io/v1alpha1/gpusharepools"


@dataclass
class Gate:
    kube: Kube
    webhook: subprocess.Popen[bytes]
    webhook_metrics: int
    webhook_log: Path
    operator: OperatorProc

    def sent(self) -> float:
        """Every Pod review the webhook process has answered."""
        url = f"http://127.0.0.1:{self.webhook_metrics}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        return sum_samples(text, "gpushare_admission_requests_total", kind="Pod")

    def alive(self) -> None:
        assert self.webhook.poll() is None, self.webhook_log.read_text()[-3000:]
        assert self.operator.proc.poll() is None, self.operator.log_path.read_text()[-3000:]

    def pods_gate(self) -> bool | None:
        """The gate of the Pods entry, as the stored configuration says."""
        hooks = self.kube.request("GET", CONFIG_PATH).body.get("webhooks") or []
        hook = next(h for h in hooks if h["name"] == "validate-pods.gpushare.io")
        return gate_of(hook, TARGETS_BY_ID["validate-pods"])


def _pod(limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{secrets.token_hex(3)}", "namespace": USER_NS},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec},
    }


def _aimed(gpus: str) -> dict[str, Any]:
    """``nvidia.com/gpu`` with a nodeSelector naming the NVIDIA pool (that may not exist yet)."""
    return _pod({"nvidia.com/gpu": gpus}, nodeSelector={"gpushare.io/pool": POOL})


def _until(gate: Gate, what: str, check: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        gate.alive()
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


@pytest.fixture(scope="module")
def gate(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    kube = Kube(cluster)
    nvidia = [
        p["metadata"]["name"] for p in kube.request("GET", POOLS_PATH).body["items"] if is_nvidia_pool(p)
    ]
    assert not nvidia, f"NVIDIA pools left by an earlier test keep the gate open: {nvidia}"
    for ns in (NS, USER_NS):
        r = kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, dry_run=False)
        assert r.status == 201, r.body
    workdir = tmp_path_factory.mktemp("nvidia-gate")
    webhook, metrics_port, log = launch_webhook(cluster.kubeconfig, workdir, NS, CONFIG)
    operator = launch_operator(
        cluster.kubeconfig, workdir / "operator.log", "--webhook-configuration", CONFIG
    )
    try:
        operator.wait_serving()
        g = Gate(kube, webhook, metrics_port, log, operator)
        bad = _pod({MEM: "2", CORE: "33"}, nodeSelector={"gpushare.io/pool": "none"})

        def answered() -> bool:
            r = kube.create(bad)
            return r.status == 422 and "admission webhook" in r.message

        _until(g, "the webhook process never answered", answered)
        yield g
    finally:
        operator.stop()
        if webhook.poll() is None:
            os.killpg(webhook.pid, signal.SIGKILL)
            webhook.wait(timeout=30)
        kube.request("DELETE", CONFIG_PATH)
        kube.request("DELETE", f"{POOLS_PATH}/{POOL}")
        for ns in (NS, USER_NS):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def _admitted_unsent(gate: Gate, obj: dict[str, Any]) -> bool:
    before = gate.sent()
    r = gate.kube.create(obj)
    assert r.status == 201, r.message
    return gate.sent() == before


def test_nvidia_pods_reach_the_webhook_only_while_an_nvidia_pool_exists(gate: Gate) -> None:
    kube = gate.kube
    # No NVIDIA pool: the shipped condition, which the operator leaves closed.
    assert gate.pods_gate() is False
    for obj in (_aimed("2"), _pod({"nvidia.com/gpu": "1"}, nodeName="gpu-node-1")):
        assert _admitted_unsent(gate, obj)
    # nvidia.com/gpu.shared (only sharing users create it) is always sent; ACK's sharing too.
    before = gate.sent()
    assert kube.create(_pod({"nvidia.com/gpu.shared": "1"})).status == 201
    assert gate.sent() == before + 1

    pool = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": POOL},
        "spec": {
            "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-{POOL}"}},
            "nvidia": {"strategy": "TimeSlicing", "replicas": 4, "failRequestsGreaterThanOne": True},
        },
    }
    r = kube.create(pool, dry_run=False)
    assert r.status == 201, r.body

    def denied() -> Response | None:
        r = kube.create(_aimed("2"))
        return r if r.status == 403 else None

    r = _until(gate, "the operator never opened the gate (or the webhook never saw the pool)", denied)
    assert "GS019-nvidia-more-than-one-shared-gpu" in r.message and f"pool {POOL}" in r.message, r.message
    assert 'admission webhook "validate-pods.gpushare.io" denied' in r.message, r.message
    assert gate.pods_gate() is True
    assert any("NVIDIA gate opened" in str(e.get("event")) for e in gate.operator.logs())
    before = gate.sent()
    assert kube.create(_aimed("1")).status == 201  # one shared GPU: sent, and admitted
    assert gate.sent() == before + 1
    # A MIG device aimed at the TimeSlicing pool is sent through the open gate (its condition names
    # nvidia.com/mig-*) and refused as `gpushare check` refuses it: the pool's config shares no MIG
    # device (GS009). Without node constraints it is not sent.
    mig = _pod({"nvidia.com/mig-1g.5gb": "1"}, nodeSelector={"gpushare.io/pool": POOL})
    r = kube.create(mig)
    assert r.status == 403 and "GS009-pool-kind-mismatch" in r.message, r.message
    assert "names no MIG device" in r.message, r.message
    assert [f.rule_id for f in evaluate(mig, Context.build((parse_pool(pool),)))] == [
        "GS009-pool-kind-mismatch"
    ]
    assert _admitted_unsent(gate, _pod({"nvidia.com/mig-1g.5gb": "1"}))

    r = kube.request("DELETE", f"{POOLS_PATH}/{POOL}")
    assert r.status == 200, r.body
    _until(
        gate, "the pool was never deleted", lambda: kube.request("GET", f"{POOLS_PATH}/{POOL}").status == 404
    )
    _until(gate, "the operator never closed the gate", lambda: gate.pods_gate() is False)
    # The apiserver applies the stored configuration a moment later: once one pod is not sent,
    # none is.
    _until(
        gate, "the apiserver kept sending nvidia.com/gpu pods", lambda: _admitted_unsent(gate, _aimed("2"))
    )
    for _ in range(3):
        assert _admitted_unsent(gate, _aimed("2"))
    assert any("NVIDIA gate closed" in str(e.get("event")) for e in gate.operator.logs())
